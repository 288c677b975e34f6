"""dat_lmr_sync_rdma_read and dat_lmr_sync_rdma_write (spec/000 and spec/001).

In the daemon's noncoherent mode RDMA reaches an I/O view of each LMR that only the sync calls
reconcile with the CPU's bytes; in coherent mode (the default) the calls succeed and do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from client.api import Ia, Pz
from client.core import Triplet
from client.dat import (
    Ref,
    dat_ia_close,
    dat_ia_open,
    dat_lmr_sync_rdma_read,
    dat_lmr_sync_rdma_write,
)
from fabricd.launch import Node
from proto.constants import DAT_SUCCESS, EventNumber, MemPriv, MemType
from proto.errors import DatInvalidHandle, DatInvalidParameter
from tests.conformance.support import Sub, assert_code, refused
from tests.conftest import StartNode
from tests.integration.flows import Pair, connect_pair, wait_event

NONCOHERENT = ["--coherency", "noncoherent"]
SyncCall = Callable[[Ia, Sequence[Triplet], int], int]


@pytest.fixture
def pair(start: StartNode) -> Iterator[tuple[Pair, Node]]:
    a = start("nc-a", extra=NONCOHERENT)
    b = start("nc-b", extra=NONCOHERENT)
    p = connect_pair(a.socket, b.socket, b.address, size=8192)
    yield p, b
    p.close()


def _write(p: Pair, data: bytes, at: int) -> None:
    p.view_a[: len(data)] = data
    p.ep_a.post_rdma_write([p.lmr_a.triplet(0, len(data))], 1, p.lmr_b.remote(at, len(data)))
    assert wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT).status == 0


def _read(p: Pair, at: int, n: int) -> bytes:
    p.ep_a.post_rdma_read([p.lmr_a.triplet(4096, n)], 2, p.lmr_b.remote(at, n))
    assert wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT).status == 0
    return bytes(p.view_a[4096 : 4096 + n])


def test_the_provider_attribute_says_whether_sync_is_needed(start: StartNode) -> None:
    """'needed if and only if the Provider attribute specifies that this operation is needed'"""
    coherent, noncoherent = start("c"), start("n", extra=NONCOHERENT)
    with Ia(coherent.socket) as ia:
        assert ia.query()["lmr_sync_req"] is False
    with Ia(noncoherent.socket) as ia:
        assert ia.query()["lmr_sync_req"] is True


def test_sync_rdma_write_makes_an_incoming_write_visible(pair: tuple[Pair, Node]) -> None:
    """sync_rdma_write: 'makes effects of an incoming RDMA Write operation visible to the
    Consumer'; 'the Consumer must call dat_lmr_sync_rdma_write() before reading data'."""
    p, _ = pair
    _write(p, b"fresh bytes", 100)
    assert bytes(p.view_b[100:111]) == bytes(11), "without the sync the consumer sees stale data"
    p.ia_b.lmr_sync_rdma_write([p.lmr_b.triplet(100, 11)])
    assert bytes(p.view_b[100:111]) == b"fresh bytes"


def test_sync_rdma_read_makes_local_writes_visible_to_an_incoming_read(
    pair: tuple[Pair, Node],
) -> None:
    """sync_rdma_read: 'must be called after the Consumer has modified the memory range but
    before the RDMA Read operation begins'; without it 'the returned contents are undefined'."""
    p, b = pair
    p.view_b[200:210] = b"cpu-writes"
    assert _read(p, 200, 10) == bytes(10), "the read saw the I/O view, not the CPU's bytes"
    assert "dat_lmr_sync_rdma_read was not called" in b.log_text(), "the daemon names the range"
    p.ia_b.lmr_sync_rdma_read([p.lmr_b.triplet(200, 10)])
    assert _read(p, 200, 10) == b"cpu-writes"


def test_a_local_write_to_an_rdma_write_target_is_synchronised_too(
    pair: tuple[Pair, Node],
) -> None:
    """sync_rdma_write: 'after an RDMA Write completes, the Consumer must call
    dat_lmr_sync_rdma_write() before performing a local write to the same range'."""
    p, _ = pair
    _write(p, b"remote", 300)
    p.ia_b.lmr_sync_rdma_write([p.lmr_b.triplet(300, 6)])
    p.view_b[300:306] = b"LOCAL!"
    p.ia_b.lmr_sync_rdma_read([p.lmr_b.triplet(300, 6)])
    assert _read(p, 300, 6) == b"LOCAL!"


def test_one_call_batches_ranges_of_different_lmrs_and_pzs(pair: tuple[Pair, Node]) -> None:
    """'It is permissible to batch synchronizations ... The local_segments entries need not
    contain the same LMR and need not be in the same Protection Zone.'"""
    p, _ = pair
    other = p.ia_b.lmr_create(
        MemType.VIRTUAL, p.ia_b.alloc(4096), 4096, p.ia_b.pz_create(), MemPriv.ALL
    )
    ep_pz = Pz(p.ia_b, p.ia_b.core.ep_mirror(p.ep_b.handle).pz)
    alias = p.ia_b.lmr_create(MemType.LMR, other, 0, ep_pz, MemPriv.ALL)  # reachable by the EP
    p.view_b[0:4] = b"abcd"
    p.ia_b.arena.view(other.registered_address, 4)[:] = b"wxyz"
    p.ia_b.lmr_sync_rdma_read([p.lmr_b.triplet(0, 4), other.triplet(0, 4)])
    assert _read(p, 0, 4) == b"abcd"
    p.ep_a.post_rdma_read([p.lmr_a.triplet(4096, 4)], 3, alias.remote(0, 4))
    assert wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT).status == 0
    assert bytes(p.view_a[4096:4100]) == b"wxyz"


def test_batched_write_sync_of_two_ranges_of_one_lmr(pair: tuple[Pair, Node]) -> None:
    """sync_rdma_write: 'It is permissible to batch synchronizations of multiple RDMA Write
    operations in a single call'; 'After this call returns, the Consumer may safely see the
    modified contents'."""
    p, _ = pair
    _write(p, b"first", 0)
    _write(p, b"second", 1000)
    p.ia_b.lmr_sync_rdma_write([p.lmr_b.triplet(0, 5), p.lmr_b.triplet(1000, 6)])
    assert bytes(p.view_b[0:5]) == b"first" and bytes(p.view_b[1000:1006]) == b"second"


def test_one_write_sync_batches_ranges_of_different_lmrs_and_pzs(pair: tuple[Pair, Node]) -> None:
    """sync_rdma_write: 'It is permissible to batch synchronizations of multiple RDMA Write
    operations in a single call ... The local_segments entries need not contain the same LMR
    and need not be in the same Protection Zone.' The LMR of another PZ is reached by the
    peer through an LMR over it in the EP's PZ, registered before the write (registration is
    a synchronisation point, so it must not come between the write and the sync)."""
    p, _ = pair
    other_pz = p.ia_b.pz_create()
    other = p.ia_b.lmr_create(MemType.VIRTUAL, p.ia_b.alloc(4096), 4096, other_pz, MemPriv.ALL)
    ep_pz = Pz(p.ia_b, p.ia_b.core.ep_mirror(p.ep_b.handle).pz)
    assert other_pz.handle != ep_pz.handle
    alias = p.ia_b.lmr_create(MemType.LMR, other, 0, ep_pz, MemPriv.ALL)  # reachable by the EP
    other_view = p.ia_b.arena.view(other.registered_address, 4096)
    _write(p, b"into lmr_b", 500)
    p.view_a[:11] = b"other-pz-wr"
    p.ep_a.post_rdma_write([p.lmr_a.triplet(0, 11)], 4, alias.remote(64, 11))
    assert wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT).status == 0
    assert bytes(p.view_b[500:510]) == bytes(10), "not synchronised yet"
    assert bytes(other_view[64:75]) == bytes(11), "not synchronised yet"
    p.ia_b.lmr_sync_rdma_write([p.lmr_b.triplet(500, 10), other.triplet(64, 11)])
    assert bytes(p.view_b[500:510]) == b"into lmr_b"
    assert bytes(other_view[64:75]) == b"other-pz-wr"


def test_a_local_write_is_synchronised_before_an_incoming_write_too(
    pair: tuple[Pair, Node],
) -> None:
    """sync_rdma_write: 'The Consumer must also use dat_lmr_sync_rdma_write() when performing
    local writes to a memory range that ... will be the target of incoming RDMA writes. After
    performing the local write, the Consumer must call dat_lmr_sync_rdma_write() before the
    RDMA Write is initiated'; USAGE: 'This call ensures that the Provider receives a coherent
    view of the buffer contents after a subsequent remote RDMA Write operation.' Local write,
    sync, incoming RDMA Write, sync: the consumer sees the RDMA Write's bytes, not its own
    (in datfabric's model the sync copies the I/O view, which RDMA reached, onto the CPU's)."""
    p, _ = pair
    p.view_b[600:616] = b"local cpu write!"
    p.ia_b.lmr_sync_rdma_write([p.lmr_b.triplet(600, 16)])
    _write(p, b"incoming rdma wr", 600)
    p.ia_b.lmr_sync_rdma_write([p.lmr_b.triplet(600, 16)])
    assert bytes(p.view_b[600:616]) == b"incoming rdma wr"
    # the range stays consistent with the provider: an RDMA Read now sees the same bytes
    assert _read(p, 600, 16) == b"incoming rdma wr"


@pytest.mark.parametrize("call", ["lmr_sync_rdma_read", "lmr_sync_rdma_write"])
def test_a_segment_outside_its_lmr_is_an_invalid_parameter(
    pair: tuple[Pair, Node], call: str
) -> None:
    """RETURN VALUES: DAT_INVALID_PARAMETER 'the address range for a local segment fell outside
    the boundaries of the corresponding Local Memory Region or the LMR handle was invalid'."""
    p, _ = pair
    with refused(DatInvalidParameter, Sub.INVALID_ARG2):
        getattr(p.ia_b, call)([p.lmr_b.triplet(8000, 500)])
    with refused(DatInvalidParameter, Sub.INVALID_ARG2):
        getattr(p.ia_b, call)([[p.lmr_b.registered_address, 4, 0xDEAD]])
    # nothing of a refused batch is done
    p.view_b[0:4] = b"keep"
    with refused(DatInvalidParameter, Sub.INVALID_ARG2):
        p.ia_b.lmr_sync_rdma_read([p.lmr_b.triplet(0, 4), p.lmr_b.triplet(9000, 1)])
    assert _read(p, 0, 4) == bytes(4)


@pytest.mark.parametrize(
    "call", [dat_lmr_sync_rdma_read, dat_lmr_sync_rdma_write], ids=lambda f: f.__name__
)
def test_invalid_handle_is_reported(start: StartNode, call: SyncCall) -> None:
    """RETURN VALUES: DAT_INVALID_HANDLE 'The DAT handle is invalid.' (an EVD, not an IA, and
    an IA that is closed); DAT_SUCCESS for the open IA."""
    node = start("h", extra=NONCOHERENT)
    ia: Ref[Ia] = Ref()
    assert dat_ia_open(node.socket, 8, Ref(), ia) == DAT_SUCCESS
    assert ia.value is not None
    ret = call(ia.value.async_evd, [], 0)  # type: ignore[arg-type]
    assert_code(ret, DatInvalidHandle, Sub.INVALID_HANDLE_IA)
    assert call(ia.value, [], 0) == DAT_SUCCESS
    assert dat_ia_close(ia.value, 0) == DAT_SUCCESS
    assert_code(call(ia.value, [], 0), DatInvalidHandle, Sub.INVALID_HANDLE_IA)


@pytest.mark.parametrize(
    "call", [dat_lmr_sync_rdma_read, dat_lmr_sync_rdma_write], ids=lambda f: f.__name__
)
def test_the_flat_layer_names_the_bad_segment_as_argument_2(
    pair: tuple[Pair, Node], call: SyncCall
) -> None:
    """RETURN VALUES: DAT_INVALID_PARAMETER for a segment outside its LMR, through the flat
    layer: the code names local_segments, argument 2 of dat_lmr_sync_rdma_*(ia_handle,
    local_segments, num_segments)."""
    p, _ = pair
    ret = call(p.ia_b, [p.lmr_b.triplet(0, 4), p.lmr_b.triplet(8190, 4)], 2)
    assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG2)
    assert call(p.ia_b, [p.lmr_b.triplet(0, 4), p.lmr_b.triplet(8190, 4)], 1) == DAT_SUCCESS


@pytest.mark.parametrize(
    "call", [dat_lmr_sync_rdma_read, dat_lmr_sync_rdma_write], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("num_segments", [-1, 3], ids=["negative", "more than given"])
def test_a_bad_num_segments_is_invalid_arg3(
    pair: tuple[Pair, Node], call: SyncCall, num_segments: int
) -> None:
    """DAT_INVALID_PARAMETER for a num_segments that does not match local_segments names
    num_segments, argument 3 of dat_lmr_sync_rdma_*."""
    p, _ = pair
    ret = call(p.ia_b, [p.lmr_b.triplet(0, 4), p.lmr_b.triplet(8, 4)], num_segments)
    assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG3)


def test_in_coherent_mode_the_calls_succeed_and_change_nothing(
    two_nodes: tuple[Node, Node],
) -> None:
    a, b = two_nodes
    p = connect_pair(a.socket, b.socket, b.address, size=8192)
    try:
        _write(p, b"visible", 0)
        assert bytes(p.view_b[0:7]) == b"visible", "coherent: no sync needed"
        p.view_b[0:7] = b"changed"
        p.ia_b.lmr_sync_rdma_write([p.lmr_b.triplet(0, 7)])
        assert bytes(p.view_b[0:7]) == b"changed", "the sync changed nothing"
        p.ia_b.lmr_sync_rdma_read([p.lmr_b.triplet(0, 7)])
        assert _read(p, 0, 7) == b"changed"
    finally:
        p.close()


def test_sync_rdma_write_brings_what_rdma_wrote_and_keeps_the_cpus_other_bytes(
    pair: tuple[Pair, Node],
) -> None:
    """The sync makes the incoming writes' bytes visible; bytes of the range that no RDMA
    Write touched keep what the CPU wrote there (nothing of the consumer's is thrown away)."""
    p, _ = pair
    p.view_b[500:520] = b"cpu-cpu-cpu-cpu-cpu-"
    _write(p, b"RDMA", 508)
    p.ia_b.lmr_sync_rdma_write([p.lmr_b.triplet(500, 20)])
    assert bytes(p.view_b[500:520]) == b"cpu-cpu-RDMAcpu-cpu-"
