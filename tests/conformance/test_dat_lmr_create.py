"""Conformance: dat_lmr_create (../shared/spec/002_d3b42e93c2a559f8.txt, second page), real daemons.

Each test names the sentence of DESCRIPTION, RETURN VALUES or USAGE it shows ("D", "R", "U"),
or the PARAMETERS entry whose behaviour it pins ("P": mem_type table, privilege flags).
DAT_REFERENCE.md section 1b settles the one code the page leaves open: a length of 0 is
DAT_LENGTH_ERROR (dapltest FFT "mem" case).

Two fabricd processes serve the whole module; every test opens its own IAs (and connection) and
closes them. The resource-exhaustion test runs its own daemon, since it squeezes its limits.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable

import pytest

from client.api import Ia, Lmr, Pz
from client.core import Event
from client.dat import Ref, dat_lmr_create
from client.shm import Buffer
from fabricd.launch import Node
from proto.constants import LMR_COOKIE_SIZE, DatReturnType, Dtos, MemPriv, MemType, get_type
from proto.constants import DtoCompletionStatus as St
from proto.errors import (
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatLengthError,
    DatModelNotSupported,
    DatPrivilegesViolation,
    DatProtectionViolation,
)
from tests.conformance.support import (
    DEADLINE_S,
    E,
    Side,
    Sub,
    _connect,
    assert_code,
    completion,
    connected,
    forge,
    pattern,
    refused,
)
from tests.conftest import StartNode
from tests.integration.flows import wait_event

REMOTE = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE
LOCAL = MemPriv.LOCAL_READ | MemPriv.LOCAL_WRITE


# -- fixtures and helpers ------------------------------------------------------------------------


def read_remote(reader: Side, remote: list[int]) -> Event:
    """RDMA Read ``remote`` into the start of the reader's buffer; the completion."""
    reader.ep.post_rdma_read([reader.lmr.triplet(0, remote[1])], 1, remote)
    return completion(reader.request_evd)


def write_remote(writer: Side, data: bytes, remote: list[int]) -> Event:
    """RDMA Write ``data`` (staged at the start of the writer's buffer) to ``remote``."""
    writer.view[: len(data)] = data
    writer.ep.post_rdma_write([writer.lmr.triplet(0, len(data))], 2, remote)
    return completion(writer.request_evd)


def refused_remotely(initiator: Side, target: Side, done: Event) -> None:
    """A remote access the target refused: DAT_DTO_ERR_REMOTE_ACCESS, both sides BROKEN."""
    assert done.status == St.DTO_ERR_REMOTE_ACCESS, done
    wait_event(initiator.connect_evd, E.CONNECTION_EVENT_BROKEN)
    wait_event(target.connect_evd, E.CONNECTION_EVENT_BROKEN)


def flat_create(
    ia: object, mem_type: int, region: object, length: object, pz: object, privileges: int
) -> int:
    """dat_lmr_create through the flat layer (C order, numeric DAT_RETURN)."""
    outs: list[Ref[int]] = [Ref() for _ in range(4)]
    return dat_lmr_create(
        ia,  # type: ignore[arg-type]
        mem_type,
        region,
        length,  # type: ignore[arg-type]
        pz,  # type: ignore[arg-type]
        privileges,
        0,
        Ref(),
        *outs,
    )


# -- DESCRIPTION -----------------------------------------------------------------------------------


def test_d_registers_a_memory_region_with_an_ia(nodes: tuple[Node, Node]) -> None:
    """D: "The dat_lmr_create() function registers a memory region with an IA": a handle, a
    non-zero lmr_context, and dat_lmr_query gives back what was registered."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        buf = ia.alloc(4096)
        lmr = ia.lmr_create(MemType.VIRTUAL, buf, 4096, pz, MemPriv.ALL)
        assert lmr.handle and lmr.lmr_context
        info = lmr.query()
        assert (info.pz, info.privileges) == (pz.handle, MemPriv.ALL)
        assert (info.registered_address, info.registered_size) == (buf.address, 4096)


@pytest.mark.parametrize(
    ("memory", "subtype"),
    [
        pytest.param("plain process memory", Sub.INVALID_ARG3, id="plain process memory"),
        pytest.param("another IA's memory", Sub.INVALID_ARG3, id="another IA's memory"),
        pytest.param(
            "past a segment",
            Sub.INVALID_ARG4,
            id="past a segment",
        ),
    ],
)
def test_d_the_buffer_must_have_been_allocated_by_the_consumer_platform(
    nodes: tuple[Node, Node], memory: str, subtype: Sub
) -> None:
    """D: "The specified buffer must have been previously allocated and pinned by the uDAPL
    Consumer on the platform": memory the provider cannot reach (not from the IA's shared
    allocator) is refused with DAT_INVALID_PARAMETER naming region_description (argument 3),
    or length (argument 4) when only the length runs past the consumer's memory."""
    with Ia(nodes[0].socket) as ia, Ia(nodes[0].socket) as other:
        pz = ia.pz_create()
        private = ctypes.create_string_buffer(4096)
        own = ia.alloc(4096)
        address, length = {
            "plain process memory": (ctypes.addressof(private), 4096),
            "another IA's memory": (other.alloc(4096).address, 4096),
            "past a segment": (own.address, 1 << 40),
        }[memory]
        with refused(DatInvalidParameter, subtype):
            ia.lmr_create(MemType.VIRTUAL, address, length, pz, MemPriv.ALL)


def test_d_the_provider_makes_the_memory_available_on_demand(nodes: tuple[Node, Node]) -> None:
    """D: "The Provider must do memory pinning if needed ... to ensure that the memory is
    available on demand for the Interface Adapter": once registered, the IA reaches the bytes
    (a peer's RDMA Write lands, its RDMA Read sees them) while the owner makes no call at all."""
    with connected(*nodes) as (a, b):
        b.view[:] = bytes(4096)
        a.view[:128] = pattern(128)
        a.ep.post_rdma_write([a.lmr.triplet(0, 128)], 1, b.lmr.remote(1000, 128))
        deadline = time.monotonic() + DEADLINE_S
        while bytes(b.view[1000:1128]) != pattern(128):
            assert time.monotonic() < deadline, "the write never reached the registered memory"
            time.sleep(0.005)
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        b.view[2000:2064] = pattern(64, 9)
        assert read_remote(a, b.lmr.remote(2000, 64)).status == St.DTO_SUCCESS
        assert bytes(a.view[:64]) == pattern(64, 9)


@pytest.mark.parametrize("dto", ["send", "recv", "rdma write", "rdma read"])
def test_d_the_lmr_context_can_be_used_for_local_buffers_of_dtos(
    nodes: tuple[Node, Node], dto: str
) -> None:
    """D: "The created lmr_context can be used for local buffers of DTOs"."""
    with connected(*nodes) as (a, b):
        buf = a.ia.alloc(256)
        lmr = a.ia.lmr_create(MemType.VIRTUAL, buf, 256, a.pz, MemPriv.ALL)
        if dto == "send":
            buf.view[:64] = pattern(64)
            b.ep.post_recv([b.lmr.triplet(0, 64)], 7)
            a.ep.post_send([lmr.triplet(0, 64)], 1)
            assert completion(a.request_evd).status == St.DTO_SUCCESS
            assert completion(b.recv_evd).status == St.DTO_SUCCESS
            assert bytes(b.view[:64]) == pattern(64)
        elif dto == "recv":
            a.ep.post_recv([lmr.triplet(0, 64)], 1)
            b.view[:64] = pattern(64, 2)
            b.ep.post_send([b.lmr.triplet(0, 64)], 7)
            assert completion(a.recv_evd).status == St.DTO_SUCCESS
            assert bytes(buf.view[:64]) == pattern(64, 2)
        elif dto == "rdma write":
            buf.view[:64] = pattern(64, 3)
            a.ep.post_rdma_write([lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64))
            assert completion(a.request_evd).status == St.DTO_SUCCESS
            assert bytes(b.view[:64]) == pattern(64, 3)
        else:
            b.view[:64] = pattern(64, 4)
            a.ep.post_rdma_read([lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64))
            assert completion(a.request_evd).status == St.DTO_SUCCESS
            assert bytes(buf.view[:64]) == pattern(64, 4)


def test_d_the_lmr_context_can_be_used_for_binding_rmrs(nodes: tuple[Node, Node]) -> None:
    """D: "The created lmr_context can be used ... for binding RMRs": an RMR bound to part of
    the LMR (named by its lmr_context triplet) gives a peer access to that part."""
    with connected(*nodes) as (a, b):
        b.view[:] = pattern(4096)
        rmr = b.ia.rmr_create(b.pz)
        context = rmr.bind(b.lmr, b.lmr.triplet(1024, 256), MemPriv.REMOTE_READ, b.ep, 5)
        bound = wait_event(b.request_evd, E.RMR_BIND_COMPLETION_EVENT)
        assert (bound.cookie, bound.status) == (5, St.DTO_SUCCESS)
        assert context and context != b.lmr.rmr_context
        assert read_remote(a, [b.lmr.registered_address + 1024, 256, context]).status == 0
        assert bytes(a.view[:256]) == pattern(4096)[1024:1280]


def test_d_the_lmr_handle_can_be_used_for_creating_other_lmrs(nodes: tuple[Node, Node]) -> None:
    """D: "lmr_handle can be used for creating other LMRs" (DAT_MEM_TYPE_LMR): the new LMR has
    its own contexts and covers the same registered range."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        parent = ia.lmr_create(MemType.VIRTUAL, ia.alloc(4096), 4096, pz, MemPriv.ALL)
        child = ia.lmr_create(MemType.LMR, parent, 0, pz, MemPriv.ALL)
        assert child.handle != parent.handle
        assert child.lmr_context not in (0, parent.lmr_context)
        assert child.rmr_context not in (0, parent.rmr_context)
        assert (child.registered_address, child.registered_size) == (
            parent.registered_address,
            parent.registered_size,
        )


def test_d_the_lmr_context_is_scoped_to_the_consumers_address_space(
    nodes: tuple[Node, Node],
) -> None:
    """D: "For uDAPL the scope of the lmr_context is the address space of the DAT Consumer":
    another consumer of the same node cannot use it, neither through the library
    (DAT_PRIVILEGES_VIOLATION: not an LMR of its own) nor by a post that skips the library (the
    daemon fails the DTO with a local protection error and the owner's bytes stay intact)."""
    a_node, b_node = nodes
    with connected(a_node, b_node) as (a, b), Ia(a_node.socket) as owner:
        theirs_buf = owner.alloc(256)
        theirs_buf.view[:64] = pattern(64)
        theirs = owner.lmr_create(MemType.VIRTUAL, theirs_buf, 256, owner.pz_create(), MemPriv.ALL)
        with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_write([theirs.triplet(0, 64)], 1, b.lmr.remote(0, 64))
        with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_read([theirs.triplet(0, 64)], 1, b.lmr.remote(0, 64))
        b.view[:64] = b"r" * 64
        forge(a, Dtos.RDMA_READ, 3, [theirs.triplet(0, 64)], b.lmr.remote(0, 64))
        failed = completion(a.request_evd)
        assert (failed.cookie, failed.status) == (3, St.DTO_ERR_LOCAL_PROTECTION)
        assert bytes(theirs_buf.view[:64]) == pattern(64), "another consumer's LMR was written"


@pytest.mark.parametrize(
    ("offset", "length"), [(0, 4096), (3, 1000), (4000, 96)], ids=["whole", "odd", "tail"]
)
def test_d_registered_size_and_address_describe_the_registered_region(
    nodes: tuple[Node, Node], offset: int, length: int
) -> None:
    """D: "The return values of registered_size and registered_address indicate to the Consumer
    how much the contiguous region of Consumer virtual memory was registered by the Provider and
    where the region starts" (dapltest FFT: registered_address <= the buffer, the registered
    range covers it). DTOs reach exactly that range: its first and last byte, not one past."""
    with connected(*nodes) as (a, b):
        address = a.buf.address + offset
        lmr = a.ia.lmr_create(MemType.VIRTUAL, address, length, a.pz, MemPriv.ALL)
        start, size = lmr.registered_address, lmr.registered_size
        assert start <= address and start + size >= address + length
        assert (lmr.query().registered_address, lmr.query().registered_size) == (start, size)
        b.view[:length] = pattern(length)
        a.ep.post_rdma_read([[start, size, lmr.lmr_context]], 1, b.lmr.remote(0, size))
        assert completion(a.request_evd).transfered_length == size
        with refused(DatInvalidParameter, Sub.INVALID_ARG3):
            a.ep.post_rdma_read([[start + size - 1, 2, lmr.lmr_context]], 2, b.lmr.remote(0, 2))
        with refused(DatInvalidParameter, Sub.INVALID_ARG3):
            a.ep.post_rdma_read([[start - 1, 2, lmr.lmr_context]], 3, b.lmr.remote(0, 2))


def _shared_lmr(ia: Ia, key: bytes, size: int = 4096) -> tuple[Buffer, Lmr, Pz]:
    pz = ia.pz_create()
    buf = ia.alloc_shared(key, size)
    return buf, ia.lmr_create(MemType.SHARED_VIRTUAL, (key, buf), size, pz, MemPriv.ALL), pz


@pytest.mark.parametrize(
    "mem_type", [MemType.VIRTUAL, MemType.LMR, MemType.SHARED_VIRTUAL], ids=lambda m: m.name
)
def test_p_mem_type_takes_any_value_of_the_table(
    nodes: tuple[Node, Node], mem_type: MemType
) -> None:
    """D: "The mem_type parameter indicates to the Provider the kind of memory to be registered,
    and can take on any of the values defined in the table in the PARAMETERS section"
    (VIRTUAL, LMR, SHARED_VIRTUAL), each with its region description."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        if mem_type == MemType.VIRTUAL:
            lmr = ia.lmr_create(mem_type, ia.alloc(512), 512, pz, MemPriv.ALL)
        elif mem_type == MemType.LMR:
            parent = ia.lmr_create(MemType.VIRTUAL, ia.alloc(512), 512, pz, MemPriv.ALL)
            lmr = ia.lmr_create(mem_type, parent, 0, pz, MemPriv.ALL)
        else:
            lmr = _shared_lmr(ia, os.urandom(LMR_COOKIE_SIZE), 512)[1]
        assert lmr.lmr_context and lmr.registered_size == 512


@pytest.mark.parametrize("dto", ["rdma read into", "rdma write from", "send from", "recv into"])
def test_d_the_pz_restricts_local_access_by_dtos(nodes: tuple[Node, Node], dto: str) -> None:
    """D: "The pz_handle parameter allows Consumers to restrict local accesses to the registered
    LMR by DTOs": an EP of another PZ gets DAT_PROTECTION_VIOLATION; the same memory registered
    in the EP's PZ works."""
    with connected(*nodes) as (a, b):
        buf = a.ia.alloc(256)
        elsewhere = a.ia.lmr_create(MemType.VIRTUAL, buf, 256, a.ia.pz_create(), MemPriv.ALL)
        here = a.ia.lmr_create(MemType.VIRTUAL, buf, 256, a.pz, MemPriv.ALL)
        posts: dict[str, Callable[[Lmr], None]] = {
            "rdma read into": lambda m: a.ep.post_rdma_read(
                [m.triplet(0, 8)], 1, b.lmr.remote(0, 8)
            ),
            "rdma write from": lambda m: a.ep.post_rdma_write(
                [m.triplet(0, 8)], 1, b.lmr.remote(0, 8)
            ),
            "send from": lambda m: a.ep.post_send([m.triplet(0, 8)], 1),
            "recv into": lambda m: a.ep.post_recv([m.triplet(0, 8)], 1),
        }
        with refused(DatProtectionViolation, Sub.NO_SUBTYPE):
            posts[dto](elsewhere)
        if dto == "send from":
            b.ep.post_recv([b.lmr.triplet(0, 8)], 9)
        posts[dto](here)
        if dto == "recv into":
            b.ep.post_send([b.lmr.triplet(0, 8)], 9)
            assert completion(a.recv_evd).status == St.DTO_SUCCESS
        else:
            assert completion(a.request_evd).status == St.DTO_SUCCESS


def test_d_consumers_naming_the_same_shared_cookie_share_the_memory(
    nodes: tuple[Node, Node],
) -> None:
    """D: DAT_MEM_TYPE_SHARED_VIRTUAL: "All DAT Consumers of the same uDAPL Provider specify the
    same Consumer cookie to indicate who is sharing the shared memory region. This supports a
    peer-to-peer model of shared memory. All DAT Consumers of the shared memory must allocate the
    memory region as shared memory using Platform-specific primitives." Two consumers of one
    node allocate (ia.alloc_shared) and register the same cookie: one memory, two LMRs."""
    key = os.urandom(LMR_COOKIE_SIZE)
    with Ia(nodes[1].socket) as first, Ia(nodes[1].socket) as second:
        buf1, lmr1, _ = _shared_lmr(first, key)
        buf2, lmr2, _ = _shared_lmr(second, key)
        assert lmr1.lmr_context != lmr2.lmr_context
        buf1.view[:64] = pattern(64, 5)
        assert bytes(buf2.view[:64]) == pattern(64, 5), "the consumers do not share the pages"
        buf2.view[100:164] = pattern(64, 6)
        assert bytes(buf1.view[100:164]) == pattern(64, 6)


def test_d_shared_memory_reached_through_either_consumers_rmr_context(
    nodes: tuple[Node, Node],
) -> None:
    """D: SHARED_VIRTUAL "Shared memory region": what a peer's RDMA does through one
    consumer's registration of the cookie is what the other consumer of that cookie sees, both
    ways (a peer write shows in the other's buffer; the other's bytes come back to a peer
    read). Only the first consumer is connected, so the peer uses its rmr_context."""
    a_node, b_node = nodes
    key = os.urandom(LMR_COOKIE_SIZE)
    with connected(a_node, b_node) as (a, b), Ia(b_node.socket) as other:
        buf_b = b.ia.alloc_shared(key, 4096)
        via_b = b.ia.lmr_create(MemType.SHARED_VIRTUAL, (key, buf_b), 4096, b.pz, MemPriv.ALL)
        buf_o = other.alloc_shared(key, 4096)
        other.lmr_create(MemType.SHARED_VIRTUAL, (key, buf_o), 4096, other.pz_create(), MemPriv.ALL)
        assert write_remote(a, pattern(100, 6), via_b.remote(200, 100)).status == 0
        assert bytes(buf_o.view[200:300]) == pattern(100, 6), "the other consumer missed it"
        buf_o.view[500:600] = pattern(100, 7)
        assert read_remote(a, via_b.remote(500, 100)).status == St.DTO_SUCCESS
        assert bytes(a.view[:100]) == pattern(100, 7)


@pytest.mark.parametrize("differ", ["after a NUL byte", "in the last byte"])
def test_d_the_shared_cookie_is_compared_in_all_40_bytes_not_as_a_c_string(
    nodes: tuple[Node, Node], differ: str
) -> None:
    """D: "The identifier is an array of 40 bytes allocated by the Consumer. The Provider must
    check the entire 40 bytes and shall not interpret it as a null-terminated string." Two
    cookies equal up to a NUL byte (or up to their last byte) name different regions."""
    base = os.urandom(8)
    if differ == "after a NUL byte":
        key1 = base + b"\x00" + b"A" * 31
        key2 = base + b"\x00" + b"B" * 31
    else:
        key1 = base + b"C" * 31 + b"\x01"
        key2 = base + b"C" * 31 + b"\x02"
    with Ia(nodes[0].socket) as one, Ia(nodes[0].socket) as two:
        buf1, lmr1, _ = _shared_lmr(one, key1)
        buf2, lmr2, _ = _shared_lmr(two, key2)
        buf1.view[:64] = pattern(64, 8)
        buf2.view[:64] = bytes(64)
        assert bytes(buf1.view[:64]) == pattern(64, 8), "the two cookies share one region"
        also1 = two.alloc_shared(key1, 4096)  # the second consumer joins the first region
        assert bytes(also1.view[:64]) == pattern(64, 8)
        # and it is not the region of the other cookie
        with refused(DatInvalidState, Sub.NO_SUBTYPE):
            two.lmr_create(MemType.SHARED_VIRTUAL, (key2, also1), 4096, two.pz_create(), 0)
        assert lmr1.lmr_context != lmr2.lmr_context


@pytest.mark.parametrize("size", [0, 39, 41])
def test_d_a_shared_cookie_is_exactly_40_bytes(nodes: tuple[Node, Node], size: int) -> None:
    """D: "The identifier is an array of 40 bytes": any other size is DAT_INVALID_PARAMETER."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        good = os.urandom(LMR_COOKIE_SIZE)
        buf = ia.alloc_shared(good, 4096)
        bad = (good + b"x")[:size]
        with refused(DatInvalidParameter, Sub.INVALID_ARG3):
            ia.lmr_create(MemType.SHARED_VIRTUAL, (bad, buf), 4096, pz, MemPriv.ALL)


def test_d_the_rmr_context_can_be_used_by_a_remote_peer(nodes: tuple[Node, Node]) -> None:
    """D: "The return value of rmr_context can be transferred by the local Consumer to a
    Consumer on a remote host to be used for an RDMA DTO"."""
    with connected(*nodes) as (a, b):
        b.view[:128] = pattern(128)
        assert read_remote(a, b.lmr.remote(0, 128)).status == St.DTO_SUCCESS
        assert bytes(a.view[:128]) == pattern(128)
        assert write_remote(a, pattern(64, 2), b.lmr.remote(512, 64)).status == St.DTO_SUCCESS
        assert bytes(b.view[512:576]) == pattern(64, 2)


PRIVILEGE_SETS = [MemPriv(p) for p in range(0x40) if p & ~int(MemPriv.ALL) == 0]


@pytest.mark.parametrize("privileges", PRIVILEGE_SETS, ids=lambda p: f"{int(p):#04x}")
def test_d_an_rmr_context_is_generated_only_with_remote_privileges(
    nodes: tuple[Node, Node], privileges: MemPriv
) -> None:
    """D: "If mem_privileges does not specify remote Read and Write privileges, rmr_context is not
    generated and NULL is returned." (Every combination of the four flags.)"""
    with Ia(nodes[0].socket) as ia:
        lmr = ia.lmr_create(MemType.VIRTUAL, ia.alloc(64), 64, ia.pz_create(), privileges)
        if privileges & REMOTE:
            assert lmr.rmr_context != 0
        else:
            assert lmr.rmr_context == 0


@pytest.mark.parametrize(
    ("privileges", "access"),
    [
        (LOCAL, "read"),
        (LOCAL, "write"),
        (LOCAL | MemPriv.REMOTE_READ, "write"),
        (LOCAL | MemPriv.REMOTE_WRITE, "read"),
    ],
    ids=["local-only read", "local-only write", "read-only write", "write-only read"],
)
def test_d_no_remote_privilege_is_given_unless_asked_for(
    nodes: tuple[Node, Node], privileges: MemPriv, access: str
) -> None:
    """D: "No remote privileges are given for Memory Region unless explicitly asked for by the
    Consumer": a peer guessing the key (the LMR's own lmr_context, or its rmr_context for the
    privilege not asked for) is refused and nothing is read or written."""
    with connected(*nodes) as (a, b):
        buf = b.ia.alloc(256)
        buf.view[:64] = pattern(64)
        lmr = b.ia.lmr_create(MemType.VIRTUAL, buf, 256, b.pz, privileges)
        key = lmr.rmr_context or lmr.lmr_context
        remote = [lmr.registered_address, 64, key]
        a.view[:64] = bytes(64)
        done = read_remote(a, remote) if access == "read" else write_remote(a, b"w" * 64, remote)
        refused_remotely(a, b, done)
        assert bytes(buf.view[:64]) == pattern(64)
        if access == "read":
            assert bytes(a.view[:64]) == bytes(64)


# -- PARAMETERS: every privilege flag --------------------------------------------------------------

NEEDS = {
    "send from": MemPriv.LOCAL_READ,
    "rdma write from": MemPriv.LOCAL_READ,
    "recv into": MemPriv.LOCAL_WRITE,
    "rdma read into": MemPriv.LOCAL_WRITE,
    "remote read of": MemPriv.REMOTE_READ,
    "remote write to": MemPriv.REMOTE_WRITE,
}
FLAGS = [
    MemPriv.NONE,
    MemPriv.LOCAL_READ,
    MemPriv.LOCAL_WRITE,
    MemPriv.REMOTE_READ,
    MemPriv.REMOTE_WRITE,
    MemPriv.ALL,
]


@pytest.mark.parametrize("use", list(NEEDS))
@pytest.mark.parametrize("privileges", FLAGS, ids=lambda p: p.name)
def test_p_each_privilege_flag_allows_its_access_and_only_it(
    nodes: tuple[Node, Node], privileges: MemPriv, use: str
) -> None:
    """P: mem_privileges "Local Read ... Local Write ... Remote Read ... Remote Write access
    requested"; the default DAT_MEM_PRIV_NONE_FLAG allows nothing and DAT_MEM_PRIV_ALL_FLAG
    (0x33) "specifies both Read and Write privileges". Local read is what a send or RDMA Write
    takes its data from, local write what a receive or RDMA Read fills; a missing local
    privilege is DAT_PRIVILEGES_VIOLATION at post, a missing remote one fails the peer's RDMA
    with DAT_DTO_ERR_REMOTE_ACCESS."""
    allowed = bool(privileges & NEEDS[use])
    with connected(*nodes) as (a, b):
        buf = a.ia.alloc(256)
        buf.view[:64] = pattern(64)
        lmr = a.ia.lmr_create(MemType.VIRTUAL, buf, 256, a.pz, privileges)
        b.view[:64] = pattern(64, 2)
        if use.startswith("remote"):
            remote = [lmr.registered_address, 64, lmr.rmr_context]
            if use == "remote read of":
                done = read_remote(b, remote)
            else:
                done = write_remote(b, pattern(64, 3), remote)
            if not allowed:
                refused_remotely(b, a, done)
                assert bytes(buf.view[:64]) == pattern(64)
                return
            assert done.status == St.DTO_SUCCESS
            expected = pattern(64) if use == "remote read of" else pattern(64, 3)
            assert bytes((b.view if use == "remote read of" else buf.view)[:64]) == expected
            return
        iov = [lmr.triplet(0, 64)]
        post: Callable[[], None] = {
            "send from": lambda: a.ep.post_send(iov, 1),
            "rdma write from": lambda: a.ep.post_rdma_write(iov, 1, b.lmr.remote(0, 64)),
            "recv into": lambda: a.ep.post_recv(iov, 1),
            "rdma read into": lambda: a.ep.post_rdma_read(iov, 1, b.lmr.remote(0, 64)),
        }[use]
        if not allowed:
            with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
                post()
            return
        if use == "send from":
            b.ep.post_recv([b.lmr.triplet(0, 64)], 2)
        post()
        if use == "recv into":
            b.ep.post_send([b.lmr.triplet(0, 64)], 2)
            assert completion(a.recv_evd).status == St.DTO_SUCCESS
        else:
            assert completion(a.request_evd).status == St.DTO_SUCCESS
        if use in ("send from", "rdma write from"):
            if use == "send from":
                completion(b.recv_evd)
            assert bytes(b.view[:64]) == pattern(64)
        else:
            assert bytes(buf.view[:64]) == pattern(64, 2)


def test_p_the_all_flag_is_0x33_and_none_is_0(nodes: tuple[Node, Node]) -> None:
    """P: "The constant value DAT_MEM_PRIV_ALL_FLAG = 0x33 ... is also defined"; "The Default
    value is DAT_MEM_PRIV_NONE_FLAG" (0): both are accepted and reported back by the query."""
    assert int(MemPriv.ALL) == 0x33 and int(MemPriv.NONE) == 0
    assert int(LOCAL | REMOTE) == 0x33
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        for privileges in (MemPriv.ALL, MemPriv.NONE):
            lmr = ia.lmr_create(MemType.VIRTUAL, ia.alloc(64), 64, pz, privileges)
            assert lmr.query().privileges == privileges


@pytest.mark.parametrize("privileges", [0x80, 0x100, 0x33 | 0x04], ids=hex)
def test_r_invalid_parameter_for_undefined_privilege_bits(
    nodes: tuple[Node, Node], privileges: int
) -> None:
    """R: DAT_INVALID_PARAMETER "Invalid parameter": mem_privileges bits no flag defines
    (mem_privileges is argument 6)."""
    with Ia(nodes[0].socket) as ia, refused(DatInvalidParameter, Sub.INVALID_ARG6):
        ia.lmr_create(MemType.VIRTUAL, ia.alloc(64), 64, ia.pz_create(), privileges)


# -- RETURN VALUES ---------------------------------------------------------------------------------


def test_r_insufficient_resources_when_the_provider_runs_out(start: StartNode) -> None:
    """R: "DAT_UNSUFFICIENT_RESOURCES The operation failed due to resource limitations." The
    daemon lets an IA register 64 MiB (--limit ia_bytes): past that, lmr_create is refused and
    changes nothing; once an LMR is freed the same registration works."""
    node = start("lmr-resources", extra=["--limit", f"ia_bytes={64 << 20}"])
    with Ia(node.socket) as ia:
        pz = ia.pz_create()
        half = 32 << 20
        first, second = ia.alloc(half), ia.alloc(half - 4096)  # one 64 MiB arena chunk
        lmr = ia.lmr_create(MemType.VIRTUAL, first, half, pz, MemPriv.ALL)
        ia.lmr_create(MemType.VIRTUAL, second, half - 4096, pz, MemPriv.ALL)
        with refused(DatInsufficientResources, Sub.RESOURCE_MEMORY):  # registered twice: 96 MiB
            ia.lmr_create(MemType.VIRTUAL, first, half, pz, MemPriv.ALL)
        lmr.free()
        assert ia.lmr_create(MemType.VIRTUAL, first, half, pz, MemPriv.ALL).lmr_context


@pytest.mark.parametrize("length", ["64", 64.0, None])
def test_r_invalid_parameter_for_a_length_that_is_not_a_vlen(
    nodes: tuple[Node, Node], length: object
) -> None:
    """R: DAT_INVALID_PARAMETER "Invalid parameter": a length that is not a DAT_VLEN. (The
    exact code: test_r_a_length_that_is_not_a_vlen_is_invalid_arg4.)"""
    with Ia(nodes[0].socket) as ia:
        buf, pz = ia.alloc(64), ia.pz_create()
        code = flat_create(ia, MemType.VIRTUAL, buf.address, length, pz, MemPriv.ALL)
        assert get_type(code) == DatReturnType.INVALID_PARAMETER


@pytest.mark.parametrize("length", ["64", 64.0, None])
def test_r_a_length_that_is_not_a_vlen_is_invalid_arg4(
    nodes: tuple[Node, Node], length: object
) -> None:
    """R: the DAT_INVALID_PARAMETER for a length that is not a DAT_VLEN names length,
    argument 4 of dat_lmr_create."""
    with Ia(nodes[0].socket) as ia:
        buf, pz = ia.alloc(64), ia.pz_create()
        code = flat_create(ia, MemType.VIRTUAL, buf.address, length, pz, MemPriv.ALL)
        assert_code(code, DatInvalidParameter, Sub.INVALID_ARG4)


@pytest.mark.parametrize("pz", ["unknown", "freed", "another IA's", "not a PZ"])
def test_r_invalid_handle_for_a_bad_pz(nodes: tuple[Node, Node], pz: str) -> None:
    """R: DAT_INVALID_HANDLE "Invalid DAT handle": the pz_handle."""
    with Ia(nodes[0].socket) as ia, Ia(nodes[0].socket) as other:
        buf = ia.alloc(64)
        if pz == "not a PZ":
            code = flat_create(ia, MemType.VIRTUAL, buf.address, 64, ia.alloc(8), 0x33)
            assert_code(code, DatInvalidHandle, Sub.INVALID_HANDLE_PZ)
            return
        handle = {"unknown": Pz(ia, 424_242), "another IA's": other.pz_create()}.get(pz)
        if handle is None:
            handle = ia.pz_create()
            handle.free()
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_PZ):
            ia.lmr_create(MemType.VIRTUAL, buf, 64, handle, MemPriv.ALL)


def test_r_invalid_handle_for_something_that_is_not_an_ia(nodes: tuple[Node, Node]) -> None:
    """R: DAT_INVALID_HANDLE "Invalid DAT handle": the ia_handle (flat layer)."""
    with Ia(nodes[0].socket) as ia:
        pz, buf = ia.pz_create(), ia.alloc(64)
        code = flat_create(pz, MemType.VIRTUAL, buf.address, 64, pz, 0x33)
        assert_code(code, DatInvalidHandle, Sub.INVALID_HANDLE_IA)


def test_r_invalid_handle_for_a_closed_ia(nodes: tuple[Node, Node]) -> None:
    """R: DAT_INVALID_HANDLE "Invalid DAT handle": an IA handle after dat_ia_close."""
    ia = Ia(nodes[0].socket)
    pz, buf = ia.pz_create(), ia.alloc(64)
    ia.close()
    code = flat_create(ia, MemType.VIRTUAL, buf.address, 64, pz, 0x33)
    assert_code(code, DatInvalidHandle, Sub.INVALID_HANDLE_IA)


@pytest.mark.parametrize("region", ["unknown handle", "freed LMR", "another IA's LMR"])
def test_r_invalid_handle_for_a_bad_lmr_region(nodes: tuple[Node, Node], region: str) -> None:
    """R: DAT_INVALID_HANDLE "Invalid DAT handle": DAT_MEM_TYPE_LMR's region description is an
    LMR handle."""
    with Ia(nodes[0].socket) as ia, Ia(nodes[0].socket) as other:
        pz = ia.pz_create()
        if region == "unknown handle":
            handle = 31_337
        elif region == "freed LMR":
            gone = ia.lmr_create(MemType.VIRTUAL, ia.alloc(64), 64, pz, MemPriv.ALL)
            gone.free()
            handle = gone.handle
        else:
            theirs = other.lmr_create(
                MemType.VIRTUAL, other.alloc(64), 64, other.pz_create(), MemPriv.ALL
            )
            handle = theirs.handle
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_LMR):
            ia.lmr_create(MemType.LMR, handle, 0, pz, MemPriv.ALL)


@pytest.mark.parametrize("memory", ["private arena memory", "another cookie's region"])
def test_r_invalid_state_for_a_shared_buffer_not_created_shared(
    nodes: tuple[Node, Node], memory: str
) -> None:
    """R: DAT_INVALID_STATE "Parameter in an invalid state. For example, shared virtual buffer
    was not created shared by the platform."""
    with Ia(nodes[0].socket) as ia:
        pz, key = ia.pz_create(), os.urandom(LMR_COOKIE_SIZE)
        if memory == "private arena memory":
            buf = ia.alloc(4096)
        else:
            buf = ia.alloc_shared(os.urandom(LMR_COOKIE_SIZE), 4096)
        with refused(DatInvalidState, Sub.NO_SUBTYPE):
            ia.lmr_create(MemType.SHARED_VIRTUAL, (key, buf), 4096, pz, MemPriv.ALL)


@pytest.mark.parametrize("mem_type", [0x03, 0x04, 0x100])
def test_r_model_not_supported_for_an_unknown_memory_type(
    nodes: tuple[Node, Node], mem_type: int
) -> None:
    """R: DAT_MODEL_NOT_SUPPORTED "The requested Model was not supported by the Provider. For
    example, requested Memory Type was not supported by the Provider."""
    with Ia(nodes[0].socket) as ia:
        buf = ia.alloc(64)
        with refused(DatModelNotSupported, Sub.NO_SUBTYPE):
            ia.lmr_create(mem_type, buf.address, 64, ia.pz_create(), MemPriv.ALL)


@pytest.mark.parametrize(
    "mem_type", [MemType.VIRTUAL, MemType.SHARED_VIRTUAL], ids=lambda m: m.name
)
def test_r_length_error_for_a_length_of_zero(nodes: tuple[Node, Node], mem_type: MemType) -> None:
    """R: a length of 0 registers nothing: DAT_LENGTH_ERROR, as DAT_REFERENCE.md 1b records for
    dapltest's FFT "mem" case (the page's own list has no better code for it)."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        if mem_type == MemType.VIRTUAL:
            region: object = ia.alloc(64)
        else:
            key = os.urandom(LMR_COOKIE_SIZE)
            region = (key, ia.alloc_shared(key, 64))
        with refused(DatLengthError, Sub.NO_SUBTYPE):
            ia.lmr_create(mem_type, region, 0, pz, MemPriv.ALL)  # type: ignore[arg-type]


# -- USAGE ---------------------------------------------------------------------------------------


def test_p_for_lmr_type_the_length_parameter_is_ignored(nodes: tuple[Node, Node]) -> None:
    """P: DAT_MEM_TYPE_LMR "Region description: An LMR_handle. Length: Length parameter is
    ignored": any length gives the parent's registered range."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        parent = ia.lmr_create(MemType.VIRTUAL, ia.alloc(1024), 1024, pz, MemPriv.ALL)
        for length in (0, 1, 12_345):
            child = ia.lmr_create(MemType.LMR, parent.handle, length, pz, MemPriv.ALL)
            assert child.registered_size == 1024
            assert child.registered_address == parent.registered_address


def test_u_an_lmr_over_an_lmr_has_its_own_pz_and_privileges_over_the_same_bytes(
    nodes: tuple[Node, Node],
) -> None:
    """U: "Consumers can create an LMR over the existing LMR memory with different Protection
    Zones and privileges using previously created IA translation table entries." The parent is
    local-only in a PZ the EP does not use; the child, in the EP's PZ with remote privileges,
    lets a peer write bytes the parent's buffer shows, and the parent's own context stays
    refused by that EP (another PZ)."""
    with connected(*nodes) as (a, b):
        buf = b.ia.alloc(1024)
        parent = b.ia.lmr_create(MemType.VIRTUAL, buf, 1024, b.ia.pz_create(), LOCAL)
        assert parent.rmr_context == 0
        child = b.ia.lmr_create(MemType.LMR, parent, 0, b.pz, MemPriv.ALL)
        assert child.rmr_context != 0
        assert write_remote(a, pattern(100), child.remote(300, 100)).status == St.DTO_SUCCESS
        assert bytes(buf.view[300:400]) == pattern(100), "the child does not reach the bytes"
        buf.view[600:650] = pattern(50, 4)
        assert read_remote(a, child.remote(600, 50)).status == St.DTO_SUCCESS
        assert bytes(a.view[:50]) == pattern(50, 4)
        with refused(DatProtectionViolation, Sub.NO_SUBTYPE):
            b.ep.post_rdma_write([parent.triplet(0, 8)], 1, a.lmr.remote(0, 8))
        b.ep.post_rdma_write([child.triplet(300, 100)], 2, a.lmr.remote(1000, 100))
        assert completion(b.request_evd).status == St.DTO_SUCCESS
        assert bytes(a.view[1000:1100]) == pattern(100)


def test_u_an_lmr_over_an_lmr_can_have_fewer_privileges(nodes: tuple[Node, Node]) -> None:
    """U: "... with different ... privileges": a local-read-only LMR over an ALL one has no
    rmr_context and cannot be filled by an RDMA Read (DAT_PRIVILEGES_VIOLATION), while the
    parent can."""
    with connected(*nodes) as (a, b):
        child = a.ia.lmr_create(MemType.LMR, a.lmr, 0, a.pz, MemPriv.LOCAL_READ)
        assert child.rmr_context == 0
        with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_read([child.triplet(0, 8)], 1, b.lmr.remote(0, 8))
        a.ep.post_rdma_write([child.triplet(0, 8)], 2, b.lmr.remote(0, 8))
        assert completion(a.request_evd).status == St.DTO_SUCCESS


def _new_connection(a: Side, b: Side, node_b: Node) -> None:
    """Replace both EPs (same IAs, PZs and EVDs) by a freshly connected pair."""
    a.ep = a.ia.ep_create(a.pz, a.recv_evd, a.request_evd, a.connect_evd)
    b.ep = b.ia.ep_create(b.pz, b.recv_evd, b.request_evd, b.connect_evd)
    _connect(a, b, node_b)


def test_u_the_rmr_context_stays_valid_until_lmr_free(nodes: tuple[Node, Node]) -> None:
    """U: "Once advertised to a remote peer, the rmr_context of the LMR cannot be invalidated.
    The only way to invalidate it is to destroy the LMR with dat_lmr_free(3DAT)." The key keeps
    working over a new connection, after LMRs over the same memory come and go; after
    dat_lmr_free the next use is refused."""
    a_node, b_node = nodes
    with connected(a_node, b_node) as (a, b):
        advertised = b.lmr.remote(0, 64)
        b.view[:64] = pattern(64)
        assert read_remote(a, advertised).status == St.DTO_SUCCESS
        b.ia.lmr_create(MemType.LMR, b.lmr, 0, b.pz, MemPriv.ALL).free()
        b.ia.lmr_create(MemType.VIRTUAL, b.buf, 4096, b.pz, MemPriv.ALL).free()
        a.ep.disconnect()
        wait_event(a.connect_evd, E.CONNECTION_EVENT_DISCONNECTED)
        wait_event(b.connect_evd, E.CONNECTION_EVENT_DISCONNECTED)
        _new_connection(a, b, b_node)
        a.view[:64] = bytes(64)
        assert read_remote(a, advertised).status == St.DTO_SUCCESS
        assert bytes(a.view[:64]) == pattern(64)
        b.lmr.free()
        refused_remotely(a, b, read_remote(a, advertised))
