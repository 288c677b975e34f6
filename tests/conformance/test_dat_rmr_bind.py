"""dat_rmr_bind (spec/004), with dat_rmr_create, dat_rmr_free and dat_rmr_query."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from client.api import Pz, Rmr
from fabricd.launch import Node
from proto.constants import (
    CompletionFlags,
    DatReturnSubtype,
    EpState,
    EventNumber,
    MemPriv,
    MemType,
)
from proto.constants import DtoCompletionStatus as St
from proto.errors import (
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatPrivilegesViolation,
    DatProtectionViolation,
)
from tests.integration.flows import Pair, connect_pair, wait_event

RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE


@pytest.fixture
def pair(two_nodes: tuple[Node, Node]) -> Iterator[Pair]:
    a, b = two_nodes
    p = connect_pair(a.socket, b.socket, b.address, size=8192)
    yield p
    p.close()


def _window(p: Pair) -> Rmr:
    return p.ia_b.rmr_create(Pz(p.ia_b, p.ia_b.core.ep_mirror(p.ep_b.handle).pz))


def _bind(
    p: Pair, rmr: Rmr, offset: int, length: int, privs: int = RW, cookie: int = 7, flags: int = 0
) -> int:
    return rmr.bind(p.lmr_b, p.lmr_b.triplet(offset, length), privs, p.ep_b, cookie, flags)


def _remote_write(p: Pair, remote: list[int], cookie: int = 1) -> int:
    p.view_a[:8] = b"windowed"
    p.ep_a.post_rdma_write([p.lmr_a.triplet(0, 8)], cookie, remote)
    return wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT).status


def test_bind_completes_asynchronously_with_its_cookie_and_a_new_context(pair: Pair) -> None:
    """'a lightweight asynchronous operation that generates a new rmr_context. The Consumer is
    notified ... through a rmr_bind Completion event on the request_evd_handle'; 'The
    user_cookie is returned to the Consumer in the rmr_bind Completion event'."""
    rmr = _window(pair)
    context = _bind(pair, rmr, 1024, 512, cookie=0xC0FFEE)
    assert context not in (0, pair.lmr_b.rmr_context)
    done = wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert (done.cookie, done.status, done.handle, done.ep) == (
        0xC0FFEE,
        0,
        rmr.handle,
        pair.ep_b.handle,
    )
    assert _remote_write(pair, rmr.remote(0, 8)) == St.DTO_SUCCESS
    assert bytes(pair.view_b[1024:1032]) == b"windowed", "the window reaches the LMR's bytes"


def test_the_window_limits_the_range(pair: Pair) -> None:
    rmr = _window(pair)
    _bind(pair, rmr, 1024, 16)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    status = _remote_write(pair, [pair.lmr_b.registered_address + 1036, 8, rmr.rmr_context])
    assert status == St.DTO_ERR_REMOTE_ACCESS, "past the window's end, inside the LMR"


def test_a_rebind_makes_the_previous_context_a_protection_error(pair: Pair) -> None:
    """'Any RDMA DTO that uses the previous value of rmr_context after the dat_rmr_bind() is
    completed fail and report a protection violation.'"""
    rmr = _window(pair)
    old = _bind(pair, rmr, 0, 64)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    new = _bind(pair, rmr, 0, 64)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert new != old
    status = _remote_write(pair, [pair.lmr_b.registered_address, 8, old])
    assert status == St.DTO_ERR_REMOTE_ACCESS
    assert wait_event(pair.evd_a, EventNumber.CONNECTION_EVENT_BROKEN).ep == pair.ep_a.handle


def test_a_zero_length_unbinds(pair: Pair) -> None:
    """'the value of length of zero means that the Consumer does not want to associate an
    RMR with any memory region within the LMR'."""
    rmr = _window(pair)
    context = _bind(pair, rmr, 0, 64)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    _bind(pair, rmr, 0, 0)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert _remote_write(pair, [pair.lmr_b.registered_address, 8, context]) == (
        St.DTO_ERR_REMOTE_ACCESS
    )


@pytest.mark.parametrize(
    ("lmr_privs", "rmr_privs"),
    [
        (MemPriv.LOCAL_WRITE | MemPriv.REMOTE_WRITE, MemPriv.REMOTE_READ),
        (MemPriv.LOCAL_READ | MemPriv.REMOTE_READ, MemPriv.REMOTE_WRITE),
    ],
)
def test_remote_privileges_need_the_matching_local_ones(
    pair: Pair, lmr_privs: MemPriv, rmr_privs: MemPriv
) -> None:
    """'Set RMR's REMOTE_READ requires that LMR's LOCAL_READ is also set; REMOTE_WRITE requires
    LOCAL_WRITE ... or the operation fails and returns DAT_PRIVILEGES_VIOLATION.'"""
    pz = Pz(pair.ia_b, pair.ia_b.core.ep_mirror(pair.ep_b.handle).pz)
    buf = pair.ia_b.alloc(256)
    lmr = pair.ia_b.lmr_create(MemType.VIRTUAL, buf, 256, pz, lmr_privs)
    rmr = pair.ia_b.rmr_create(pz)
    with pytest.raises(DatPrivilegesViolation):
        rmr.bind(lmr, lmr.triplet(0, 64), rmr_privs, pair.ep_b)


def test_a_window_allows_only_its_own_privileges(pair: Pair) -> None:
    rmr = _window(pair)
    _bind(pair, rmr, 0, 64, privs=MemPriv.REMOTE_READ)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert _remote_write(pair, rmr.remote(0, 8)) == St.DTO_ERR_REMOTE_ACCESS


def test_bind_fences_later_operations_on_the_endpoint(pair: Pair) -> None:
    """'automatically fences all Send, RDMA Read, and RDMA Write DTOs and dat_rmr_bind()
    operations submitted on the Endpoint after the dat_rmr_bind()'; 'a Send DTO does not start
    until dat_rmr_bind() completed': a peer that receives the context in a Send can use it."""
    pair.ep_a.post_recv([pair.lmr_a.triplet(100, 16)], cookie=50)
    rmr = _window(pair)
    context = _bind(pair, rmr, 2048, 64, cookie=1)
    pair.view_b[0:4] = context.to_bytes(4, "big")
    pair.ep_b.post_send([pair.lmr_b.triplet(0, 4)], cookie=2)
    bind = wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    sent = wait_event(pair.evd_b, EventNumber.DTO_COMPLETION_EVENT)
    assert (bind.cookie, sent.cookie) == (1, 2), "the send completes after the bind"
    got = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
    assert got.cookie == 50
    told = int.from_bytes(bytes(pair.view_a[100:104]), "big")
    remote = [pair.lmr_b.registered_address + 2048, 8, told]
    assert _remote_write(pair, remote) == St.DTO_SUCCESS


def test_unsignalled_needs_the_endpoint_to_allow_it(pair: Pair) -> None:
    """'DAT_COMPLETION_UNSIGNALLED_FLAG is only valid if the Endpoint Request Completion Flags
    DAT_COMPLETION_UNSIGNALLED_FLAG. Otherwise, DAT_INVALID_PARAMETER is returned.'"""
    with pytest.raises(DatInvalidParameter):
        _bind(pair, _window(pair), 0, 64, flags=CompletionFlags.UNSIGNALLED)


def test_suppress_hides_a_successful_bind(pair: Pair) -> None:
    rmr = _window(pair)
    _bind(pair, rmr, 0, 64, cookie=1, flags=CompletionFlags.SUPPRESS)
    _bind(pair, rmr, 0, 64, cookie=2)
    assert wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT).cookie == 2


def test_invalid_parameter_when_the_range_exceeds_the_lmr(pair: Pair) -> None:
    """RETURN VALUES: DAT_INVALID_PARAMETER 'the target_address or segment_length exceeded the
    limits of the existing LMR'."""
    with pytest.raises(DatInvalidParameter):
        _bind(pair, _window(pair), 8000, 500)


def test_invalid_handle(pair: Pair) -> None:
    rmr = _window(pair)
    rmr.free()
    with pytest.raises(DatInvalidHandle):
        _bind(pair, rmr, 0, 64)


def test_protection_violation_when_the_pzs_differ(pair: Pair) -> None:
    other = pair.ia_b.rmr_create(pair.ia_b.pz_create())
    with pytest.raises(DatProtectionViolation):
        _bind(pair, other, 0, 64)


def test_valid_in_disconnected_then_flushed_invalid_state_otherwise(pair: Pair) -> None:
    """'valid for the Endpoint in the DAT_EP_STATE_CONNECTED and DAT_EP_STATE_DISCONNECTED
    states ... immediately flushed'; DAT_INVALID_STATE otherwise."""
    pz = Pz(pair.ia_b, pair.ia_b.core.ep_mirror(pair.ep_b.handle).pz)
    idle = pair.ia_b.ep_create(pz, pair.evd_b, pair.evd_b, pair.evd_b)
    with pytest.raises(DatInvalidState) as err:
        _window(pair).bind(pair.lmr_b, pair.lmr_b.triplet(0, 64), RW, idle)
    assert err.value.subtype == DatReturnSubtype.INVALID_STATE_EP_UNCONNECTED
    pair.ep_b.disconnect()
    wait_event(pair.evd_b, EventNumber.CONNECTION_EVENT_DISCONNECTED)
    _bind(pair, _window(pair), 0, 64, cookie=9)
    flushed = wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert (flushed.cookie, flushed.status) == (9, St.DTO_ERR_FLUSHED)


def test_an_lmr_with_a_bound_window_cannot_be_freed(pair: Pair) -> None:
    """dat_lmr_free: 'The LMR cannot be destroyed if it is in use by an RMR.'"""
    rmr = _window(pair)
    _bind(pair, rmr, 0, 64)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    with pytest.raises(DatInvalidState):
        pair.lmr_b.free()
    rmr.free()
    pair.lmr_b.free()


def test_query_reports_the_binding(pair: Pair) -> None:
    rmr = _window(pair)
    context = _bind(pair, rmr, 64, 32, privs=MemPriv.REMOTE_READ)
    param = rmr.query()
    assert param["rmr_context"] == context and param["lmr"] is pair.lmr_b
    assert param["lmr_triplet"] == [pair.lmr_b.registered_address + 64, 32]


def test_a_bind_that_fails_after_returning_breaks_the_connection(pair: Pair) -> None:
    """'If the RMR Bind fails after dat_rmr_bind() returns, connection of ep_handle is broken.
    The Endpoint transitions into a DAT_EP_STATE_DISCONNECTED state and the
    DAT_CONNECTION_EVENT_BROKEN event is delivered to the connect_evd_handle'. Here the bind
    waits behind a fence while its LMR is freed, so it fails when it executes."""
    a_pz = Pz(pair.ia_a, pair.ia_a.core.ep_mirror(pair.ep_a.handle).pz)
    lmr = pair.ia_a.lmr_create(MemType.VIRTUAL, pair.ia_a.alloc(256), 256, a_pz, MemPriv.ALL)
    rmr = pair.ia_a.rmr_create(a_pz)
    pair.ep_a.post_send([pair.lmr_a.triplet(0, 8)], cookie=1)  # B has no receive: it stalls
    pair.ep_a.post_rdma_read([pair.lmr_a.triplet(64, 8)], 2, pair.lmr_b.remote(0, 8))
    rmr.bind(
        lmr, lmr.triplet(0, 64), RW, pair.ep_a, cookie=3, flags=CompletionFlags.BARRIER_FENCE
    )  # waits for the read
    lmr.free()  # allowed: the window is not bound yet
    pair.ep_b.post_recv([pair.lmr_b.triplet(0, 64)], cookie=4)  # the stream moves on
    sent = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
    read = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
    assert [(e.cookie, e.status) for e in (sent, read)] == [(1, 0), (2, 0)]
    bind = wait_event(pair.evd_a, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert (bind.cookie, bind.status) == (3, St.RMR_OPERATION_FAILED)
    assert wait_event(pair.evd_a, EventNumber.CONNECTION_EVENT_BROKEN).ep == pair.ep_a.handle
    assert pair.ep_a.state == EpState.DISCONNECTED
