"""Conformance: dat_lmr_free (../shared/spec/002_d3b42e93c2a559f8.txt, first page), real daemons.

Each test names the sentence of DESCRIPTION or RETURN VALUES it shows ("D", "R").

On "shall fail and report a protection violation" for a DTO that uses a freed LMR: the posts
check their local_iov synchronously, and their pages list "one of the LMRs used in local_iov is
invalid" under DAT_PRIVILEGES_VIOLATION, which is what the library returns. A post that gets past
the library (a forged frame, i.e. a DTO racing the free) is failed by the daemon with the
completion status DAT_DTO_ERR_LOCAL_PROTECTION, the DTO-level protection violation; both paths
are tested.

Two fabricd processes serve the whole module; every test opens its own IAs and connections.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from client.api import Ia, Lmr
from client.core import LmrInfo
from client.dat import Ref, dat_lmr_free, dat_lmr_query
from client.shm import Buffer
from fabricd.launch import Node
from proto.constants import DAT_SUCCESS, Dtos, EpState, MemPriv, MemType
from proto.constants import DtoCompletionStatus as St
from proto.errors import (
    DatInvalidHandle,
    DatInvalidState,
    DatPrivilegesViolation,
    DatQueueEmpty,
)
from tests.conformance.support import (
    E,
    Side,
    Sub,
    _connect,
    _ends,
    assert_code,
    completion,
    connected,
    forge,
    pattern,
    paused,
    refused,
)
from tests.integration.flows import wait_event

# -- fixtures and helpers ------------------------------------------------------------------------


def freed_lmr(side: Side, size: int = 256) -> tuple[Lmr, Buffer]:
    """An LMR (ALL privileges, the side's PZ) over fresh memory, already freed."""
    buf = side.ia.alloc(size)
    lmr = side.ia.lmr_create(MemType.VIRTUAL, buf, size, side.pz, MemPriv.ALL)
    lmr.free()
    return lmr, buf


# -- DESCRIPTION -----------------------------------------------------------------------------------


def test_d_destroys_an_instance_of_the_lmr(nodes: tuple[Node, Node]) -> None:
    """D: "The dat_lmr_free() function destroys an instance of the LMR" (R: DAT_SUCCESS): the
    LMR no longer holds its PZ, which a PZ free shows (refused while the LMR lived)."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        lmr = ia.lmr_create(MemType.VIRTUAL, ia.alloc(256), 256, pz, MemPriv.ALL)
        with refused(DatInvalidState, Sub.INVALID_STATE_PZ_IN_USE):
            pz.free()
        assert dat_lmr_free(lmr) == DAT_SUCCESS
        pz.free()


def test_d_the_lmr_cannot_be_destroyed_while_in_use_by_an_rmr(nodes: tuple[Node, Node]) -> None:
    """D: "The LMR cannot be destroyed if it is in use by an RMR." R: DAT_INVALID_STATE
    "Parameter in an invalid state; LMR is in use by an RMR instance." The refused free changes
    nothing (the window still works); once the RMR is freed the LMR can be."""
    with connected(*nodes) as (a, b):
        b.view[:256] = pattern(256)
        rmr = b.ia.rmr_create(b.pz)
        context = rmr.bind(b.lmr, b.lmr.triplet(0, 256), MemPriv.REMOTE_READ, b.ep, 1)
        assert wait_event(b.request_evd, E.RMR_BIND_COMPLETION_EVENT).status == St.DTO_SUCCESS
        with refused(DatInvalidState, Sub.INVALID_STATE_LMR_IN_USE):
            b.lmr.free()
        a.ep.post_rdma_read([a.lmr.triplet(0, 256)], 2, [b.lmr.registered_address, 256, context])
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        assert bytes(a.view[:256]) == pattern(256)
        b.ep.post_rdma_write([b.lmr.triplet(0, 64)], 3, a.lmr.remote(512, 64))  # still its own
        assert completion(b.request_evd).status == St.DTO_SUCCESS
        rmr.free()
        b.lmr.free()


def test_d_free_does_not_deallocate_the_memory_region(nodes: tuple[Node, Node]) -> None:
    """D: "The operation does not deallocate the memory region or unpin memory on a host": after
    the free of the only LMR over the consumer's memory, its bytes are intact, readable and
    writable, and the same memory can be registered again and used by RDMA."""
    with connected(*nodes) as (a, b):
        a.view[:512] = pattern(512)
        a.ep.post_rdma_write([a.lmr.triplet(0, 512)], 1, b.lmr.remote(0, 512))
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        b.lmr.free()
        assert bytes(b.view[:512]) == pattern(512), "the freed LMR's bytes changed"
        b.view[512:1024] = pattern(512, 2)
        assert bytes(b.view[512:1024]) == pattern(512, 2)
        again = b.ia.lmr_create(MemType.VIRTUAL, b.buf, 4096, b.pz, MemPriv.ALL)
        a.ep.post_rdma_read([a.lmr.triplet(0, 1024)], 2, again.remote(0, 1024))
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        assert bytes(a.view[:1024]) == pattern(512) + pattern(512, 2)


@pytest.mark.parametrize("path", ["tcp", "local"])
@pytest.mark.parametrize("sibling", ["VIRTUAL", "LMR"])
def test_d_free_does_not_unpin_memory_other_lmrs_still_use(
    nodes: tuple[Node, Node], sibling: str, path: str
) -> None:
    """D: "The operation does not ... unpin memory on a host": another LMR over the same memory
    (registered again, or created over the freed one) keeps working for RDMA after the free."""
    with connected(*_ends(nodes, path)) as (a, b):
        buf = b.ia.alloc(1024)
        first = b.ia.lmr_create(MemType.VIRTUAL, buf, 1024, b.pz, MemPriv.ALL)
        if sibling == "VIRTUAL":
            other = b.ia.lmr_create(MemType.VIRTUAL, buf, 1024, b.pz, MemPriv.ALL)
        else:
            other = b.ia.lmr_create(MemType.LMR, first, 0, b.pz, MemPriv.ALL)
        first.free()
        a.view[:1024] = pattern(1024, 3)
        a.ep.post_rdma_write([a.lmr.triplet(0, 1024)], 1, other.remote(0, 1024))
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        assert bytes(buf.view) == pattern(1024, 3)
        buf.view[:100] = pattern(100, 4)
        a.ep.post_rdma_read([a.lmr.triplet(2000, 100)], 2, other.remote(0, 100))
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        assert bytes(a.view[2000:2100]) == pattern(100, 4)


def test_d_the_handle_of_a_destroyed_lmr_fails_in_a_new_lmr(nodes: tuple[Node, Node]) -> None:
    """D: "Use of the handle of the destroyed LMR in any subsequent operation except for
    dat_lmr_free() fails": creating an LMR over it (DAT_MEM_TYPE_LMR) is DAT_INVALID_HANDLE."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        lmr = ia.lmr_create(MemType.VIRTUAL, ia.alloc(256), 256, pz, MemPriv.ALL)
        lmr.free()
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_LMR):
            ia.lmr_create(MemType.LMR, lmr, 0, pz, MemPriv.ALL)


def test_d_the_handle_of_a_destroyed_lmr_fails_in_an_rmr_bind(nodes: tuple[Node, Node]) -> None:
    """D: "Use of the handle of the destroyed LMR in any subsequent operation ... fails":
    dat_rmr_bind (2.0 passes the LMR handle) refuses it with DAT_INVALID_HANDLE."""
    with connected(*nodes) as (_, b):
        lmr, _ = freed_lmr(b)
        rmr = b.ia.rmr_create(b.pz)
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_LMR):
            rmr.bind(lmr, lmr.triplet(0, 64), MemPriv.REMOTE_READ, b.ep, 1)


def test_d_the_handle_of_a_destroyed_lmr_fails_in_a_query(nodes: tuple[Node, Node]) -> None:
    """D: "Use of the handle of the destroyed LMR in any subsequent operation except for
    dat_lmr_free() fails": dat_lmr_query of it is DAT_INVALID_HANDLE."""
    with Ia(nodes[0].socket) as ia:
        lmr = ia.lmr_create(MemType.VIRTUAL, ia.alloc(64), 64, ia.pz_create(), MemPriv.ALL)
        lmr.free()
        param: Ref[LmrInfo] = Ref()
        assert_code(dat_lmr_query(lmr, 0x7FF, param), DatInvalidHandle, Sub.INVALID_HANDLE_LMR)


def test_d_a_second_free_of_the_destroyed_handle_is_an_invalid_handle(
    nodes: tuple[Node, Node],
) -> None:
    """D: dat_lmr_free is the one call the page excepts from "fails" for a destroyed handle; the
    RETURN VALUES make a second free DAT_INVALID_HANDLE "The lmr_handle parameter is invalid",
    with nothing else disturbed (the IA still registers memory)."""
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        lmr = ia.lmr_create(MemType.VIRTUAL, ia.alloc(64), 64, pz, MemPriv.ALL)
        assert dat_lmr_free(lmr) == DAT_SUCCESS
        assert_code(dat_lmr_free(lmr), DatInvalidHandle, Sub.INVALID_HANDLE_LMR)
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_LMR):
            lmr.free()
        assert ia.lmr_create(MemType.VIRTUAL, ia.alloc(64), 64, pz, MemPriv.ALL).lmr_context


@pytest.mark.parametrize("dto", ["rdma read into", "rdma write from", "send from", "recv into"])
def test_d_a_dto_using_the_destroyed_lmr_fails_with_a_violation(
    nodes: tuple[Node, Node], dto: str
) -> None:
    """D: "Any DTO operation that uses the destroyed LMR after the dat_lmr_free() is completed
    shall fail and report a protection violation": the post is refused at once
    (DAT_PRIVILEGES_VIOLATION, "one of the LMRs used in local_iov is invalid" on the post pages)
    and nothing is queued or transferred."""
    with connected(*nodes) as (a, b):
        lmr, buf = freed_lmr(a)
        buf.view[:64] = pattern(64)
        b.view[:64] = bytes(64)
        iov = [lmr.triplet(0, 64)]
        post: Callable[[], None] = {
            "rdma read into": lambda: a.ep.post_rdma_read(iov, 1, b.lmr.remote(0, 64)),
            "rdma write from": lambda: a.ep.post_rdma_write(iov, 1, b.lmr.remote(0, 64)),
            "send from": lambda: a.ep.post_send(iov, 1),
            "recv into": lambda: a.ep.post_recv(iov, 1),
        }[dto]
        with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
            post()
        assert a.ep.get_status() == (EpState.CONNECTED, True, True)
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 2, b.lmr.remote(100, 8))
        assert completion(a.request_evd).cookie == 2, "the refused DTO was queued"
        assert bytes(b.view[:64]) == bytes(64)


@pytest.mark.parametrize("kind", [Dtos.RDMA_READ, Dtos.RDMA_WRITE], ids=["read", "write"])
def test_d_a_dto_past_the_library_using_the_destroyed_lmr_fails_with_local_protection(
    nodes: tuple[Node, Node], kind: Dtos
) -> None:
    """D: "Any DTO operation that uses the destroyed LMR after the dat_lmr_free() is completed
    shall fail and report a protection violation": a DTO that skips the library's check reaches
    the daemon, which completes it with DAT_DTO_ERR_LOCAL_PROTECTION (the connection breaks, as
    after any failed DTO); the freed memory and the target are untouched."""
    with connected(*nodes) as (a, b):
        lmr, buf = freed_lmr(a)
        buf.view[:64] = pattern(64)
        b.view[:64] = pattern(64, 2)
        forge(a, kind, 9, [lmr.triplet(0, 64)], b.lmr.remote(0, 64))
        failed = completion(a.request_evd)
        assert (failed.cookie, failed.status) == (9, St.DTO_ERR_LOCAL_PROTECTION)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        assert bytes(buf.view[:64]) == pattern(64)
        assert bytes(b.view[:64]) == pattern(64, 2)


def test_d_the_protection_violation_is_reported_for_the_dto_that_used_the_destroyed_lmr(
    nodes: tuple[Node, Node],
) -> None:
    """D: "Any DTO operation that uses the destroyed LMR ... shall fail and report a protection
    violation": the violation belongs to that DTO's completion, even when an earlier DTO is
    still outstanding (its target daemon is stopped); the earlier one is flushed by the break."""
    a_node, b_node = nodes
    with connected(a_node, b_node) as (a, b):
        lmr, _ = freed_lmr(a)
        with paused(b_node):
            a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64))
            forge(a, Dtos.RDMA_READ, 2, [lmr.triplet(0, 64)], b.lmr.remote(0, 64))
            got = {e.cookie: e.status for e in (completion(a.request_evd) for _ in range(2))}
        assert got == {1: St.DTO_ERR_FLUSHED, 2: St.DTO_ERR_LOCAL_PROTECTION}


def post_rdma(side: Side, op: str, remote: list[int], cookie: int = 1) -> None:
    """An RDMA Read into bytes 1024.. of the side's buffer, or a Write of bytes 0.. of it."""
    side.view[:64] = pattern(64, 5)
    if op == "read":
        side.ep.post_rdma_read([side.lmr.triplet(1024, 64)], cookie, remote)
    else:
        side.ep.post_rdma_write([side.lmr.triplet(0, 64)], cookie, remote)


def second_pair(a: Side, b: Side, node_b: Node) -> tuple[Side, Side]:
    """Another connection between the same two consumers (same IAs, PZs and LMRs)."""
    ends = []
    for side in (a, b):
        request_evd, recv_evd, connect_evd = (side.ia.evd_create(64) for _ in range(3))
        ep = side.ia.ep_create(side.pz, recv_evd, request_evd, connect_evd)
        ends.append(
            Side(side.ia, side.pz, request_evd, recv_evd, connect_evd, ep, side.buf, side.lmr)
        )
    _connect(ends[0], ends[1], node_b)
    return ends[0], ends[1]


@pytest.mark.parametrize("path", ["tcp", "local"])
@pytest.mark.parametrize("op", ["read", "write"])
def test_d_remote_rdma_with_the_destroyed_rmr_context_fails_with_remote_access(
    nodes: tuple[Node, Node], op: str, path: str
) -> None:
    """D: "Any remote RDMA operation that uses the destroyed LMR rmr_context, whose
    Transport-specific request arrived to the local host after the dat_lmr_free() has completed,
    fails and reports a protection violation": the free returned before the post, so the
    initiator gets DAT_DTO_ERR_REMOTE_ACCESS, nothing is read or written, and DTOs posted after
    it are flushed."""
    with connected(*_ends(nodes, path)) as (a, b):
        buf = b.ia.alloc(256)
        buf.view[:64] = pattern(64)
        lmr = b.ia.lmr_create(MemType.VIRTUAL, buf, 256, b.pz, MemPriv.ALL)
        stale = lmr.remote(0, 64)
        lmr.free()
        a.view[1024:1088] = bytes(64)
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 2, b.lmr.remote(0, 8))
        post_rdma(a, op, stale, cookie=3)
        earlier, failed = completion(a.request_evd), completion(a.request_evd)
        assert (earlier.cookie, earlier.status) == (2, St.DTO_SUCCESS)
        assert (failed.cookie, failed.status) == (3, St.DTO_ERR_REMOTE_ACCESS)
        assert bytes(buf.view[:64]) == pattern(64), "a write through the stale key landed"
        assert bytes(a.view[1024:1088]) == bytes(64), "a read through the stale key returned data"
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 4, b.lmr.remote(0, 8))
        assert (completion(a.request_evd).status) == St.DTO_ERR_FLUSHED


@pytest.mark.parametrize("op", ["read", "write"])
def test_d_the_destroyed_rmr_context_breaks_the_connection_on_which_it_was_used(
    nodes: tuple[Node, Node], op: str
) -> None:
    """D: "The use of rmr_context of the destroyed LMR by a remote peer for an RDMA DTO results
    in an error and broken connection on which it was used": BROKEN on both ends of that
    connection, while a second connection between the same consumers stays up and working."""
    a_node, b_node = nodes
    with connected(a_node, b_node) as (a, b):
        a2, b2 = second_pair(a, b, b_node)
        lmr, _ = freed_lmr(b)
        post_rdma(a, op, lmr.remote(0, 64))
        assert completion(a.request_evd).status == St.DTO_ERR_REMOTE_ACCESS
        assert wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN).ep == a.ep.handle
        assert wait_event(b.connect_evd, E.CONNECTION_EVENT_BROKEN).ep == b.ep.handle
        assert (a.ep.state, b.ep.state) == (EpState.DISCONNECTED, EpState.DISCONNECTED)
        assert (a2.ep.state, b2.ep.state) == (EpState.CONNECTED, EpState.CONNECTED)
        b.view[:64] = pattern(64, 6)
        a2.ep.post_rdma_read([a.lmr.triplet(0, 64)], 5, b.lmr.remote(0, 64))
        assert completion(a2.request_evd).status == St.DTO_SUCCESS
        assert bytes(a.view[:64]) == pattern(64, 6)
        for evd in (a2.connect_evd, b2.connect_evd):
            with refused(DatQueueEmpty, Sub.NO_SUBTYPE):
                evd.dequeue()


@pytest.mark.parametrize("op", ["read", "write"])
def test_d_remote_rdma_racing_the_free_completes_or_fails_with_remote_access(
    nodes: tuple[Node, Node], op: str
) -> None:
    """D: "Remote RDMA operation that uses the destroyed LMR rmr_context, whose
    Transport-specific request arrived to the local host prior to the dat_lmr_free() returns,
    might or might not complete successfully. If it fails, DAT_DTO_ERR_REMOTE_ACCESS is reported
    in DAT_DTO_COMPLETION_STATUS for the remote RDMA DTO and the connection is broken." Sixteen
    DTOs race the free: each completes once, in order, as a run of successes, then at most one
    DAT_DTO_ERR_REMOTE_ACCESS (with BROKEN) followed only by flushed ones."""
    with connected(*nodes) as (a, b):
        buf = b.ia.alloc(16 * 1024)
        lmr = b.ia.lmr_create(MemType.VIRTUAL, buf, 16 * 1024, b.pz, MemPriv.ALL)
        for i in range(16):
            remote = lmr.remote(1024 * i, 1024)
            if op == "read":
                a.ep.post_rdma_read([a.lmr.triplet(0, 1024)], i, remote)
            else:
                a.ep.post_rdma_write([a.lmr.triplet(0, 1024)], i, remote)
        lmr.free()
        got = [completion(a.request_evd) for _ in range(16)]
        assert [e.cookie for e in got] == list(range(16))
        statuses = [e.status for e in got]
        ok = statuses.count(St.DTO_SUCCESS)
        assert statuses[:ok] == [St.DTO_SUCCESS] * ok
        if ok < 16:
            assert statuses[ok] == St.DTO_ERR_REMOTE_ACCESS, statuses
            assert set(statuses[ok + 1 :]) <= {St.DTO_ERR_FLUSHED}, statuses
            wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        else:
            assert a.ep.state == EpState.CONNECTED


# -- RETURN VALUES -------------------------------------------------------------------------------


@pytest.mark.parametrize("handle", ["unknown", "another IA's LMR", "not an LMR"])
def test_r_invalid_handle_for_a_bad_lmr_handle(nodes: tuple[Node, Node], handle: str) -> None:
    """R: DAT_INVALID_HANDLE "The lmr_handle parameter is invalid"; the LMR a handle of another
    IA names is untouched."""
    with Ia(nodes[0].socket) as ia, Ia(nodes[0].socket) as other:
        theirs = other.lmr_create(MemType.VIRTUAL, other.alloc(64), 64, other.pz_create(), 0x33)
        if handle == "not an LMR":
            not_an_lmr: object = ia.pz_create()
            ret = dat_lmr_free(not_an_lmr)  # type: ignore[arg-type]
            assert_code(ret, DatInvalidHandle, Sub.INVALID_HANDLE_LMR)
            return
        info = theirs.info
        if handle == "unknown":
            info = LmrInfo(777_777, 1, 0, 64, 0, 0, MemPriv.ALL)
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_LMR):
            Lmr(ia, info).free()
        theirs.free()
