"""dat_rmr_bind (spec/004), with dat_rmr_create, dat_rmr_free and dat_rmr_query.

Where a bind has to stay outstanding, it is held back behind a fence: the binding EP first posts
a Send the peer has no receive for (so the peer holds it and everything behind it) and an RDMA
Read, then the bind with DAT_COMPLETION_BARRIER_FENCE_FLAG, which waits for that read. The bind
executes only once the peer posts a receive. Where the new rmr_context must be used by the EP
that bound it, the test connects two EPs of one IA to each other (``loop``, the daemon's local
path), so that an RDMA DTO of the binding EP reaches the window it bound.

Refusals are checked by their full DAT_RETURN. DAT_INVALID_ARGn counts the arguments of the 2.0
call, dat_rmr_bind(rmr_handle, lmr_handle, lmr_triplet, mem_privileges, va_type, ep_handle,
user_cookie, completion_flags, rmr_context) (the ``..._is_invalid_argN`` tests).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import pytest

from client.api import Ep, Evd, Ia, Lmr, Pz, Rmr
from client.core import Event
from client.dat import Ref, dat_rmr_bind
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.constants import (
    TIMEOUT_INFINITE,
    CloseFlags,
    CompletionFlags,
    DatReturnSubtype,
    EpState,
    EventNumber,
    MemPriv,
    MemType,
    PspFlags,
    VaType,
)
from proto.constants import DtoCompletionStatus as St
from proto.errors import (
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatModelNotSupported,
    DatPrivilegesViolation,
    DatProtectionViolation,
    DatQueueEmpty,
    DatTimeoutExpired,
)
from tests.conformance.support import Sub, assert_code, refused
from tests.conftest import StartNode
from tests.integration.flows import Pair, connect_pair, stop_process, wait_event

RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE
E = EventNumber
WAIT_US = 10_000_000  # generous: a wait only ends early when the event is there
FENCE = CompletionFlags.BARRIER_FENCE


@pytest.fixture
def pair(two_nodes: tuple[Node, Node]) -> Iterator[Pair]:
    a, b = two_nodes
    p = connect_pair(a.socket, b.socket, b.address, size=8192)
    yield p
    p.close()


def _connect(a: Node, b: Node, attr_a: EpAttr | None, attr_b: EpAttr | None, qual: int) -> Pair:
    """connect_pair, with endpoint attributes of the test's choosing on either side."""
    ia_a, ia_b = Ia(a.socket), Ia(b.socket)
    pz_a, pz_b = ia_a.pz_create(), ia_b.pz_create()
    evd_a, evd_b = ia_a.evd_create(256), ia_b.evd_create(256)
    ep_a = ia_a.ep_create(pz_a, evd_a, evd_a, evd_a, attr_a)
    ep_b = ia_b.ep_create(pz_b, evd_b, evd_b, evd_b, attr_b)
    buf_a, buf_b = ia_a.alloc(8192), ia_b.alloc(8192)
    lmr_a = ia_a.lmr_create(MemType.VIRTUAL, buf_a, 8192, pz_a, MemPriv.ALL)
    lmr_b = ia_b.lmr_create(MemType.VIRTUAL, buf_b, 8192, pz_b, MemPriv.ALL)
    ia_b.psp_create(qual, evd_b)
    ep_a.connect(b.address, qual, WAIT_US)
    ia_b.cr(wait_event(evd_b, E.CONNECTION_REQUEST_EVENT)).accept(ep_b)
    wait_event(evd_a, E.CONNECTION_EVENT_ESTABLISHED)
    wait_event(evd_b, E.CONNECTION_EVENT_ESTABLISHED)
    return Pair(ia_a, ia_b, ep_a, ep_b, evd_a, evd_b, lmr_a, lmr_b, buf_a.view, buf_b.view)


@pytest.fixture
def pair_with(two_nodes: tuple[Node, Node]) -> Iterator[Callable[..., Pair]]:
    """Makes a connected pair whose EPs get the given attributes (closed after the test)."""
    made: list[Pair] = []

    def make(attr_a: EpAttr | None = None, attr_b: EpAttr | None = None) -> Pair:
        made.append(_connect(*two_nodes, attr_a, attr_b, 4100 + len(made)))
        return made[-1]

    yield make
    for p in made:
        p.close()


@dataclass
class Loop:
    """Two EPs of one IA, in one PZ, connected to each other over the daemon's local path."""

    ia: Ia
    pz: Pz
    x: Ep
    y: Ep
    evd_x: Evd
    evd_y: Evd
    lmr: Lmr
    view: memoryview

    def window(self, offset: int) -> int:
        """The address of ``offset`` in the LMR."""
        return self.lmr.registered_address + offset


@pytest.fixture
def loop(start: StartNode) -> Iterator[Loop]:
    node = start("solo")
    ia = Ia(node.socket)
    pz = ia.pz_create()
    evd_x, evd_y, cr_evd = ia.evd_create(64), ia.evd_create(64), ia.evd_create(8)
    x = ia.ep_create(pz, evd_x, evd_x, evd_x)
    y = ia.ep_create(pz, evd_y, evd_y, evd_y)
    buf = ia.alloc(8192)
    lmr = ia.lmr_create(MemType.VIRTUAL, buf, 8192, pz, MemPriv.ALL)
    ia.psp_create(4200, cr_evd)
    x.connect(node.address, 4200, WAIT_US)
    ia.cr(wait_event(cr_evd, E.CONNECTION_REQUEST_EVENT)).accept(y)
    wait_event(evd_x, E.CONNECTION_EVENT_ESTABLISHED)
    wait_event(evd_y, E.CONNECTION_EVENT_ESTABLISHED)
    yield Loop(ia, pz, x, y, evd_x, evd_y, lmr, buf.view)
    ia.close()


def _window(p: Pair) -> Rmr:
    return p.ia_b.rmr_create(Pz(p.ia_b, p.ia_b.core.ep_mirror(p.ep_b.handle).pz))


def _bind(
    p: Pair, rmr: Rmr, offset: int, length: int, privs: int = RW, cookie: int = 7, flags: int = 0
) -> int:
    return rmr.bind(p.lmr_b, p.lmr_b.triplet(offset, length), privs, p.ep_b, cookie, flags)


def _remote_write(p: Pair, remote: list[int], cookie: int = 1) -> int:
    p.view_a[:8] = b"windowed"
    p.ep_a.post_rdma_write([p.lmr_a.triplet(0, 8)], cookie, remote)
    return wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status


def _remote_read(p: Pair, remote: list[int], cookie: int = 2) -> int:
    """An RDMA Read from ``remote`` into lmr_a[16:24]; returns its completion status."""
    p.ep_a.post_rdma_read([p.lmr_a.triplet(16, 8)], cookie, remote)
    return wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status


def _remote(p: Pair, op: str, remote: list[int]) -> int:
    return _remote_write(p, remote) if op == "write" else _remote_read(p, remote)


def _next(evd: Evd) -> Event:
    """The next event on ``evd``, whatever it is."""
    event, _ = evd.wait(WAIT_US)
    return event


def _nothing_queued(evd: Evd) -> None:
    with refused(DatQueueEmpty, Sub.NO_SUBTYPE):
        evd.dequeue()


def _hold_back(ep: Ep, lmr: Lmr, remote: list[int]) -> None:
    """Post a Send the peer has no receive for (cookie 1) and an RDMA Read of ``remote``
    (cookie 2), which the peer holds behind the Send. A bind posted next with BARRIER_FENCE
    waits for the read, so it cannot execute until the peer posts a receive."""
    ep.post_send([lmr.triplet(0, 8)], cookie=1)
    ep.post_rdma_read([lmr.triplet(64, 8)], 2, remote)


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


@pytest.mark.parametrize("op", ["write", "read"])
def test_a_rebind_makes_the_previous_context_a_protection_error(pair: Pair, op: str) -> None:
    """'Any RDMA DTO that uses the previous value of rmr_context after the dat_rmr_bind() is
    completed fail and report a protection violation': an RDMA Write or an RDMA Read with the
    old context fails with DAT_DTO_ERR_REMOTE_ACCESS and breaks the connection; the new
    context works. A failed read leaves the local buffer alone."""
    rmr = _window(pair)
    pair.view_b[0:8] = b"b's data"
    old = _bind(pair, rmr, 0, 64)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    new = _bind(pair, rmr, 0, 64)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert new != old
    assert _remote(pair, op, [pair.lmr_b.registered_address, 8, new]) == St.DTO_SUCCESS
    pair.view_a[16:24] = b"a's own!"
    status = _remote(pair, op, [pair.lmr_b.registered_address, 8, old])
    assert status == St.DTO_ERR_REMOTE_ACCESS
    assert wait_event(pair.evd_a, EventNumber.CONNECTION_EVENT_BROKEN).ep == pair.ep_a.handle
    if op == "read":
        assert bytes(pair.view_a[16:24]) == b"a's own!"


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
    with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
        rmr.bind(lmr, lmr.triplet(0, 64), rmr_privs, pair.ep_b)


@pytest.mark.parametrize(
    ("privs", "allowed", "refused"),
    [(MemPriv.REMOTE_READ, "read", "write"), (MemPriv.REMOTE_WRITE, "write", "read")],
    ids=["read-only", "write-only"],
)
def test_a_window_allows_only_its_own_privileges(
    pair: Pair, privs: MemPriv, allowed: str, refused: str
) -> None:
    """'The mem_privileges parameter allows Consumers to restrict the type of remote accesses
    to the registered RMR by RDMA DTOs': the access the window grants works, the other one
    fails with DAT_DTO_ERR_REMOTE_ACCESS and breaks the connection (the LMR has both remote
    privileges: the window alone restricts)."""
    rmr = _window(pair)
    _bind(pair, rmr, 0, 64, privs=privs)
    wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert _remote(pair, allowed, rmr.remote(0, 8)) == St.DTO_SUCCESS
    pair.view_b[8:16] = b"unread.."
    pair.view_a[:24] = bytes(24)
    assert _remote(pair, refused, rmr.remote(8, 8)) == St.DTO_ERR_REMOTE_ACCESS
    assert wait_event(pair.evd_a, EventNumber.CONNECTION_EVENT_BROKEN).ep == pair.ep_a.handle
    assert bytes(pair.view_a[16:24]) == bytes(8), "nothing was read"
    if refused == "write":
        assert bytes(pair.view_b[8:16]) == b"unread..", "nothing was written"


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
    DAT_COMPLETION_UNSIGNALLED_FLAG. Otherwise, DAT_INVALID_PARAMETER is returned.' Nothing is
    posted. (The exact code: test_unsignalled_without_the_endpoint_flag_is_invalid_arg8.)"""
    with pytest.raises(DatInvalidParameter):
        _bind(pair, _window(pair), 0, 64, flags=CompletionFlags.UNSIGNALLED)
    pair.ia_b.query()
    _nothing_queued(pair.evd_b)


def test_unsignalled_without_the_endpoint_flag_is_invalid_arg8(pair: Pair) -> None:
    """The DAT_INVALID_PARAMETER for UNSIGNALLED names completion_flags: argument 8 of the
    2.0 call, in the flat layer and in the API."""
    rmr = _window(pair)
    ret = dat_rmr_bind(
        rmr,
        pair.lmr_b,
        pair.lmr_b.triplet(0, 64),
        RW,
        VaType.VA,
        pair.ep_b,
        1,
        CompletionFlags.UNSIGNALLED,
        Ref(),
    )
    assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG8)
    with refused(DatInvalidParameter, Sub.INVALID_ARG8):
        _bind(pair, rmr, 0, 64, flags=CompletionFlags.UNSIGNALLED)


def test_suppress_hides_a_successful_bind(pair: Pair) -> None:
    rmr = _window(pair)
    _bind(pair, rmr, 0, 64, cookie=1, flags=CompletionFlags.SUPPRESS)
    _bind(pair, rmr, 0, 64, cookie=2)
    assert wait_event(pair.evd_b, EventNumber.RMR_BIND_COMPLETION_EVENT).cookie == 2


def test_invalid_parameter_when_the_range_exceeds_the_lmr(pair: Pair) -> None:
    """RETURN VALUES: DAT_INVALID_PARAMETER 'the target_address or segment_length exceeded the
    limits of the existing LMR'. Nothing is posted. (The exact code:
    test_a_range_past_the_lmr_is_invalid_arg3.)"""
    with pytest.raises(DatInvalidParameter):
        _bind(pair, _window(pair), 8000, 500)
    pair.ia_b.query()
    _nothing_queued(pair.evd_b)


@pytest.mark.parametrize(
    ("offset", "length"), [(8000, 500), (8192 - 63, 64)], ids=["far", "1 byte"]
)
def test_a_range_past_the_lmr_is_invalid_arg3(pair: Pair, offset: int, length: int) -> None:
    """The DAT_INVALID_PARAMETER for a range outside the LMR names lmr_triplet: argument 3 of
    the 2.0 call (flat layer and API)."""
    rmr = _window(pair)
    triplet = pair.lmr_b.triplet(offset, length)
    ret = dat_rmr_bind(rmr, pair.lmr_b, triplet, RW, VaType.VA, pair.ep_b, 1, 0, Ref())
    assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG3)
    with refused(DatInvalidParameter, Sub.INVALID_ARG3):
        _bind(pair, rmr, offset, length)


@pytest.mark.parametrize("privileges", [0x80, RW | 0x04], ids=hex)
def test_undefined_privilege_bits_are_invalid_arg4(pair: Pair, privileges: int) -> None:
    """mem_privileges bits no flag defines are DAT_INVALID_PARAMETER naming mem_privileges:
    argument 4 of the 2.0 call (flat layer and API)."""
    rmr = _window(pair)
    triplet = pair.lmr_b.triplet(0, 64)
    ret = dat_rmr_bind(rmr, pair.lmr_b, triplet, privileges, VaType.VA, pair.ep_b, 1, 0, Ref())
    assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG4)
    with refused(DatInvalidParameter, Sub.INVALID_ARG4):
        _bind(pair, rmr, 0, 64, privs=privileges)


def test_invalid_handle(pair: Pair) -> None:
    rmr = _window(pair)
    rmr.free()
    with refused(DatInvalidHandle, Sub.INVALID_HANDLE_RMR):
        _bind(pair, rmr, 0, 64)
    ret = dat_rmr_bind(rmr, pair.lmr_b, pair.lmr_b.triplet(0, 64), RW, 0, pair.ep_b, 1, 0, Ref())
    assert_code(ret, DatInvalidHandle, Sub.INVALID_HANDLE_RMR)


def test_protection_violation_when_the_pzs_differ(pair: Pair) -> None:
    other = pair.ia_b.rmr_create(pair.ia_b.pz_create())
    with refused(DatProtectionViolation, Sub.NO_SUBTYPE):
        _bind(pair, other, 0, 64)


def test_valid_in_disconnected_then_flushed_invalid_state_otherwise(pair: Pair) -> None:
    """'valid for the Endpoint in the DAT_EP_STATE_CONNECTED and DAT_EP_STATE_DISCONNECTED
    states ... immediately flushed'; DAT_INVALID_STATE otherwise."""
    pz = Pz(pair.ia_b, pair.ia_b.core.ep_mirror(pair.ep_b.handle).pz)
    idle = pair.ia_b.ep_create(pz, pair.evd_b, pair.evd_b, pair.evd_b)
    with refused(DatInvalidState, Sub.INVALID_STATE_EP_UNCONNECTED):
        _window(pair).bind(pair.lmr_b, pair.lmr_b.triplet(0, 64), RW, idle)
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
    with refused(DatInvalidState, Sub.INVALID_STATE_LMR_IN_USE):
        pair.lmr_b.free()
    rmr.free()
    pair.lmr_b.free()


def test_query_reports_the_binding(pair: Pair) -> None:
    rmr = _window(pair)
    context = _bind(pair, rmr, 64, 32, privs=MemPriv.REMOTE_READ)
    param = rmr.query()
    assert param["rmr_context"] == context and param["lmr"] is pair.lmr_b
    assert param["lmr_triplet"] == [pair.lmr_b.registered_address + 64, 32]


@pytest.mark.parametrize(
    "flags", [FENCE, FENCE | CompletionFlags.SUPPRESS], ids=["signalled", "suppressed"]
)
def test_a_bind_that_fails_after_returning_breaks_the_connection(pair: Pair, flags: int) -> None:
    """'If the RMR Bind fails after dat_rmr_bind() returns, connection of ep_handle is broken.
    The Endpoint transitions into a DAT_EP_STATE_DISCONNECTED state and the
    DAT_CONNECTION_EVENT_BROKEN event is delivered to the connect_evd_handle'. Here the bind
    waits behind a fence while its LMR is freed, so it fails when it executes. With
    DAT_COMPLETION_SUPPRESS_FLAG ('Suppress successful Completion') the failure is still
    reported."""
    a_pz = Pz(pair.ia_a, pair.ia_a.core.ep_mirror(pair.ep_a.handle).pz)
    lmr = pair.ia_a.lmr_create(MemType.VIRTUAL, pair.ia_a.alloc(256), 256, a_pz, MemPriv.ALL)
    rmr = pair.ia_a.rmr_create(a_pz)
    pair.ep_a.post_send([pair.lmr_a.triplet(0, 8)], cookie=1)  # B has no receive: it stalls
    pair.ep_a.post_rdma_read([pair.lmr_a.triplet(64, 8)], 2, pair.lmr_b.remote(0, 8))
    rmr.bind(lmr, lmr.triplet(0, 64), RW, pair.ep_a, cookie=3, flags=flags)  # waits for the read
    lmr.free()  # allowed: the window is not bound yet
    pair.ep_b.post_recv([pair.lmr_b.triplet(0, 64)], cookie=4)  # the stream moves on
    sent = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
    read = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
    assert [(e.cookie, e.status) for e in (sent, read)] == [(1, 0), (2, 0)]
    bind = wait_event(pair.evd_a, EventNumber.RMR_BIND_COMPLETION_EVENT)
    assert (bind.cookie, bind.status) == (3, St.RMR_OPERATION_FAILED)
    assert wait_event(pair.evd_a, EventNumber.CONNECTION_EVENT_BROKEN).ep == pair.ep_a.handle
    assert pair.ep_a.state == EpState.DISCONNECTED


# -- using the context too soon, and the fence -------------------------------------------------


def test_using_the_context_before_the_bind_completes_succeeds_or_breaks_the_connection(
    pair: Pair,
) -> None:
    """'The use of rmr_context by a remote host for an RDMA DTO prior to the completion of the
    dat_rmr_bind() can result in an error and a broken connection.' A binds a window and the
    bind is held back behind a fence; B uses the context at once. The only outcomes allowed:
    the write succeeds (and the bind completes), or it fails with DAT_DTO_ERR_REMOTE_ACCESS and
    the connection is broken on both sides, with nothing written into A's memory."""
    a_pz = Pz(pair.ia_a, pair.ia_a.core.ep_mirror(pair.ep_a.handle).pz)
    rmr = pair.ia_a.rmr_create(a_pz)
    _hold_back(pair.ep_a, pair.lmr_a, pair.lmr_b.remote(0, 8))
    context = rmr.bind(pair.lmr_a, pair.lmr_a.triplet(1024, 64), RW, pair.ep_a, 3, FENCE)
    pair.view_b[0:8] = b"too soon"
    pair.ep_b.post_rdma_write(
        [pair.lmr_b.triplet(0, 8)], 4, [pair.lmr_a.registered_address + 1024, 8, context]
    )
    used = wait_event(pair.evd_b, E.DTO_COMPLETION_EVENT)
    assert used.cookie == 4
    assert used.status in (St.DTO_SUCCESS, St.DTO_ERR_REMOTE_ACCESS), used
    if used.status == St.DTO_SUCCESS:
        pair.ep_b.post_recv([pair.lmr_b.triplet(256, 64)], cookie=5)
        done = [_next(pair.evd_a) for _ in range(3)]
        assert [(e.event_number, e.cookie, e.status) for e in done] == [
            (E.DTO_COMPLETION_EVENT, 1, St.DTO_SUCCESS),
            (E.DTO_COMPLETION_EVENT, 2, St.DTO_SUCCESS),
            (E.RMR_BIND_COMPLETION_EVENT, 3, St.DTO_SUCCESS),
        ]
        assert bytes(pair.view_a[1024:1032]) == b"too soon"
        assert pair.ep_a.state == pair.ep_b.state == EpState.CONNECTED
        return
    assert wait_event(pair.evd_b, E.CONNECTION_EVENT_BROKEN).ep == pair.ep_b.handle
    seen = [_next(pair.evd_a) for _ in range(4)]  # BROKEN and the three outstanding requests
    assert [e.event_number for e in seen].count(E.CONNECTION_EVENT_BROKEN) == 1, seen
    ended = [(e.cookie, e.status) for e in seen if e.event_number != E.CONNECTION_EVENT_BROKEN]
    assert ended == [(1, St.DTO_ERR_FLUSHED), (2, St.DTO_ERR_FLUSHED), (3, St.DTO_ERR_FLUSHED)]
    assert pair.ep_a.state == pair.ep_b.state == EpState.DISCONNECTED
    assert bytes(pair.view_a[1024:1032]) == bytes(8), "nothing reached A's memory"


def test_bind_fences_later_rdma_writes_and_reads(loop: Loop) -> None:
    """'The dat_rmr_bind() function automatically fences all Send, RDMA Read, and RDMA Write
    DTOs ... submitted on the Endpoint ep_handle after the dat_rmr_bind(). Therefore, none of
    these operations starts until dat_rmr_bind() is completed.' The bind is held back; an RDMA
    Write and an RDMA Read posted right after it on the same EP use the new context (they
    reach the window over the local path). Had either started before the bind, its context
    would not be bound yet at the target and it would fail; both succeed, complete after the
    bind, and move the right bytes."""
    rmr = loop.ia.rmr_create(loop.pz)
    loop.view[4096:4104] = b"in-windo"
    _hold_back(loop.x, loop.lmr, loop.lmr.remote(256, 8))
    context = rmr.bind(loop.lmr, loop.lmr.triplet(4096, 1024), RW, loop.x, 3, FENCE)
    loop.view[16:24] = b"via-ctx!"
    loop.x.post_rdma_write([loop.lmr.triplet(16, 8)], 4, [loop.window(4096 + 512), 8, context])
    loop.x.post_rdma_read([loop.lmr.triplet(32, 8)], 5, [loop.window(4096), 8, context])
    loop.ia.query()  # a round trip: the daemon has taken every post
    _nothing_queued(loop.evd_x)  # the bind waits, and so does everything behind it
    loop.y.post_recv([loop.lmr.triplet(2048, 64)], cookie=6)
    done = [_next(loop.evd_x) for _ in range(5)]
    assert [(e.event_number, e.cookie, e.status) for e in done] == [
        (E.DTO_COMPLETION_EVENT, 1, St.DTO_SUCCESS),
        (E.DTO_COMPLETION_EVENT, 2, St.DTO_SUCCESS),
        (E.RMR_BIND_COMPLETION_EVENT, 3, St.DTO_SUCCESS),
        (E.DTO_COMPLETION_EVENT, 4, St.DTO_SUCCESS),
        (E.DTO_COMPLETION_EVENT, 5, St.DTO_SUCCESS),
    ]
    assert bytes(loop.view[4096 + 512 : 4096 + 520]) == b"via-ctx!"
    assert bytes(loop.view[32:40]) == b"in-windo"
    assert loop.x.state == EpState.CONNECTED


def test_bind_fences_a_later_bind(loop: Loop) -> None:
    """The fence covers 'dat_rmr_bind() operations submitted on the Endpoint ep_handle after
    the dat_rmr_bind()' too: a held-back bind, then a second bind of the same RMR. The second
    runs after the first, so its context is the one that works and the first one is dead
    (had the second started first, the first would have replaced it)."""
    rmr = loop.ia.rmr_create(loop.pz)
    _hold_back(loop.x, loop.lmr, loop.lmr.remote(256, 8))
    first = rmr.bind(loop.lmr, loop.lmr.triplet(4096, 1024), RW, loop.x, 3, FENCE)
    second = rmr.bind(loop.lmr, loop.lmr.triplet(4096, 1024), RW, loop.x, 4)
    assert first != second
    loop.view[16:24] = b"2nd ctx!"
    loop.x.post_rdma_write([loop.lmr.triplet(16, 8)], 5, [loop.window(4096), 8, second])
    loop.y.post_recv([loop.lmr.triplet(2048, 64)], cookie=6)
    done = [_next(loop.evd_x) for _ in range(5)]
    assert [(e.event_number, e.cookie, e.status) for e in done] == [
        (E.DTO_COMPLETION_EVENT, 1, St.DTO_SUCCESS),
        (E.DTO_COMPLETION_EVENT, 2, St.DTO_SUCCESS),
        (E.RMR_BIND_COMPLETION_EVENT, 3, St.DTO_SUCCESS),
        (E.RMR_BIND_COMPLETION_EVENT, 4, St.DTO_SUCCESS),
        (E.DTO_COMPLETION_EVENT, 5, St.DTO_SUCCESS),
    ]
    assert bytes(loop.view[4096:4104]) == b"2nd ctx!"
    loop.x.post_rdma_write([loop.lmr.triplet(16, 8)], 7, [loop.window(4096), 8, first])
    failed = wait_event(loop.evd_x, E.DTO_COMPLETION_EVENT)
    assert (failed.cookie, failed.status) == (7, St.DTO_ERR_REMOTE_ACCESS)
    wait_event(loop.evd_x, E.CONNECTION_EVENT_BROKEN)


# -- completion flags and cookies ----------------------------------------------------------------


def test_suppress_still_reports_a_flushed_bind(pair: Pair) -> None:
    """'The completion of the posted RMR Bind is reported ... based on the specified
    completion_flags value': SUPPRESS suppresses only a successful completion, so a bind
    flushed because the EP is DISCONNECTED is still reported."""
    pair.ep_b.disconnect()
    wait_event(pair.evd_b, E.CONNECTION_EVENT_DISCONNECTED)
    _bind(pair, _window(pair), 0, 64, cookie=21, flags=CompletionFlags.SUPPRESS)
    flushed = wait_event(pair.evd_b, E.RMR_BIND_COMPLETION_EVENT)
    assert (flushed.cookie, flushed.status) == (21, St.DTO_ERR_FLUSHED)


def test_unsignalled_is_accepted_when_the_endpoint_allows_it(
    pair_with: Callable[..., Pair],
) -> None:
    """'The value of DAT_COMPLETION_UNSIGNALLED_FLAG is only valid if the Endpoint Request
    Completion Flags DAT_COMPLETION_UNSIGNALLED_FLAG': with the EP's request_completion_flags
    allowing it, the bind is accepted and takes effect. Its completion is queued as a
    non-notification event: it wakes no waiter on its own, a later signalled one does, and
    the unsignalled event comes first."""
    p = pair_with(attr_b=EpAttr(request_completion_flags=CompletionFlags.UNSIGNALLED))
    rmr = _window(p)
    _bind(p, rmr, 256, 64, cookie=31, flags=CompletionFlags.UNSIGNALLED)
    state = p.ia_b.core.evd(p.evd_b.handle)
    deadline = time.monotonic() + WAIT_US / 1e6
    while not state.queue:  # read the event queue, without waiting on the EVD
        assert time.monotonic() < deadline, "the bind's completion never arrived"
        time.sleep(0.01)
        p.ia_b.core.refill(state)
    with refused(DatTimeoutExpired, Sub.NO_SUBTYPE) as expired:
        p.evd_b.wait(200_000)  # the event is there, but it notifies no waiter
    assert expired.value.nmore == 1
    done = p.evd_b.dequeue()
    assert (done.event_number, done.cookie, done.status, done.notify) == (
        E.RMR_BIND_COMPLETION_EVENT,
        31,
        St.DTO_SUCCESS,
        False,
    )
    assert _remote_write(p, rmr.remote(0, 8)) == St.DTO_SUCCESS
    assert bytes(p.view_b[256:264]) == b"windowed", "the unsignalled bind took effect"
    _bind(p, _window(p), 0, 64, cookie=32, flags=CompletionFlags.UNSIGNALLED)
    _bind(p, _window(p), 0, 64, cookie=33)
    woken = [wait_event(p.evd_b, E.RMR_BIND_COMPLETION_EVENT) for _ in range(2)]
    assert [(e.cookie, e.notify) for e in woken] == [(32, False), (33, True)]


def test_cookies_are_opaque_and_need_not_be_unique(pair: Pair) -> None:
    """'These identifiers are completely under user control and are opaque to the Provider.
    The Consumer is not required to ensure the uniqueness of the user_cookie value. The
    user_cookie is returned to the Consumer in the rmr_bind Completion event for this
    operation.' Repeated cookies and the edge values 0 and 2**64-1 each come back with their
    own bind, in order."""
    cookies = [7, 7, 0, 2**64 - 1, 0xC0FFEE, 7, 0]
    windows = [_window(pair) for _ in cookies]
    for rmr, cookie in zip(windows, cookies, strict=True):
        _bind(pair, rmr, 0, 64, cookie=cookie)
    done = [wait_event(pair.evd_b, E.RMR_BIND_COMPLETION_EVENT) for _ in cookies]
    assert [(e.handle, e.cookie, e.status) for e in done] == [
        (rmr.handle, cookie, St.DTO_SUCCESS) for rmr, cookie in zip(windows, cookies, strict=True)
    ]


@pytest.mark.parametrize("cookie", [-1, 2**64], ids=["negative", "2**64"])
def test_a_cookie_that_is_not_a_u64_is_an_invalid_parameter(pair: Pair, cookie: int) -> None:
    """A DAT_RMR_COOKIE is a 64-bit value: one that is not is DAT_INVALID_PARAMETER, as it is
    for every DTO post, and no bind is posted. (The exact code:
    test_a_cookie_that_is_not_a_u64_is_invalid_arg7.)"""
    rmr = _window(pair)
    with pytest.raises(DatInvalidParameter):
        _bind(pair, rmr, 0, 64, cookie=cookie)
    pair.ia_b.query()
    _nothing_queued(pair.evd_b)


@pytest.mark.parametrize("cookie", [-1, 2**64], ids=["negative", "2**64"])
def test_a_cookie_that_is_not_a_u64_is_invalid_arg7(pair: Pair, cookie: int) -> None:
    """The DAT_INVALID_PARAMETER for a cookie that is not a u64 names user_cookie: argument 7
    of the 2.0 call (flat layer and API)."""
    rmr = _window(pair)
    ret = dat_rmr_bind(
        rmr, pair.lmr_b, pair.lmr_b.triplet(0, 64), RW, VaType.VA, pair.ep_b, cookie, 0, Ref()
    )
    assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG7)
    with refused(DatInvalidParameter, Sub.INVALID_ARG7):
        _bind(pair, rmr, 0, 64, cookie=cookie)


# -- RETURN VALUES ---------------------------------------------------------------------------------


def test_insufficient_resources_when_the_request_queue_is_full(
    two_nodes: tuple[Node, Node], pair_with: Callable[..., Pair]
) -> None:
    """RETURN VALUES: DAT_INSUFFICIENT_RESOURCES 'The operation failed due to resource
    limitations': the EP's max_request_dtos (2) RDMA Writes are outstanding (their target
    daemon is stopped), so a bind is refused, and nothing of it is reported; once the writes
    complete, the same bind is accepted and works."""
    b_node = two_nodes[1]
    p = pair_with(attr_a=EpAttr(max_request_dtos=2))
    rmr = p.ia_a.rmr_create(Pz(p.ia_a, p.ia_a.core.ep_mirror(p.ep_a.handle).pz))
    stop_process(b_node.proc.pid)
    try:
        p.ep_a.post_rdma_write([p.lmr_a.triplet(0, 8)], 1, p.lmr_b.remote(0, 8))
        p.ep_a.post_rdma_write([p.lmr_a.triplet(8, 8)], 2, p.lmr_b.remote(8, 8))
        with refused(DatInsufficientResources, Sub.RESOURCE_TEP):
            rmr.bind(p.lmr_a, p.lmr_a.triplet(512, 64), RW, p.ep_a, cookie=3)
        assert p.ep_a.get_status() == (EpState.CONNECTED, True, False)
    finally:
        os.kill(b_node.proc.pid, signal.SIGCONT)
    assert [wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).cookie for _ in range(2)] == [1, 2]
    context = rmr.bind(p.lmr_a, p.lmr_a.triplet(512, 64), RW, p.ep_a, cookie=4)
    assert wait_event(p.evd_a, E.RMR_BIND_COMPLETION_EVENT).cookie == 4
    p.view_b[:8] = b"resource"
    p.ep_b.post_rdma_write(
        [p.lmr_b.triplet(0, 8)], 5, [p.lmr_a.registered_address + 512, 8, context]
    )
    assert wait_event(p.evd_b, E.DTO_COMPLETION_EVENT).status == St.DTO_SUCCESS
    assert bytes(p.view_a[512:520]) == b"resource"


@dataclass
class Side:
    """One consumer of a node: an IA, a PZ, one EVD for everything, an EP and an ALL LMR."""

    ia: Ia
    pz: Pz
    evd: Evd
    ep: Ep
    lmr: Lmr


def _side(stack: ExitStack, node: Node) -> Side:
    ia = stack.enter_context(Ia(node.socket))
    pz = ia.pz_create()
    evd = ia.evd_create(64)
    lmr = ia.lmr_create(MemType.VIRTUAL, ia.alloc(4096), 4096, pz, MemPriv.ALL)
    return Side(ia, pz, evd, ia.ep_create(pz, evd, evd, evd), lmr)


@contextmanager
def _resumed(node: Node) -> Iterator[None]:
    """SIGSTOP ``node``'s daemon now; SIGCONT it when the block ends, however it ends."""
    stop_process(node.proc.pid)
    try:
        yield
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)


@contextmanager
def _ep_in(a_node: Node, b_node: Node, state: EpState) -> Iterator[Side]:
    """An EP in ``state``, with an LMR in its PZ (a is the active node, b the passive one)."""
    with ExitStack() as stack:
        a, b = _side(stack, a_node), _side(stack, b_node)
        qual = 4300 + state
        if state in (EpState.RESERVED, EpState.PASSIVE_CONNECTION_PENDING):
            b.ia.rsp_create(qual, b.ep, b.evd)
            if state == EpState.PASSIVE_CONNECTION_PENDING:
                a.ep.connect(b_node.address, qual, TIMEOUT_INFINITE)
                wait_event(b.evd, E.CONNECTION_REQUEST_EVENT)
            yield b
        elif state == EpState.TENTATIVE_CONNECTION_PENDING:
            b.ia.psp_create(qual, b.evd, PspFlags.PROVIDER)
            a.ep.connect(b_node.address, qual, TIMEOUT_INFINITE)
            request = wait_event(b.evd, E.CONNECTION_REQUEST_EVENT)
            tentative = Ep(b.ia, b.ia.cr(request).query().ep)
            # give the provider's EP a PZ and EVDs: every other argument of the bind is valid
            tentative.modify(pz=b.pz, recv_evd=b.evd, request_evd=b.evd, connect_evd=b.evd)
            yield Side(b.ia, b.pz, b.evd, tentative, b.lmr)
        elif state in (EpState.ACTIVE_CONNECTION_PENDING, EpState.COMPLETION_PENDING):
            b.ia.psp_create(qual, b.evd)
            a.ep.connect(b_node.address, qual, TIMEOUT_INFINITE)
            request = wait_event(b.evd, E.CONNECTION_REQUEST_EVENT)
            if state == EpState.ACTIVE_CONNECTION_PENDING:
                yield a
            else:
                with _resumed(a_node):  # the active side cannot send its RTU
                    b.ia.cr(request).accept(b.ep)
                    yield b
        else:  # DISCONNECT_PENDING: a graceful disconnect waits for a write to a stopped node
            b.ia.psp_create(qual, b.evd)
            a.ep.connect(b_node.address, qual, WAIT_US)
            b.ia.cr(wait_event(b.evd, E.CONNECTION_REQUEST_EVENT)).accept(b.ep)
            wait_event(a.evd, E.CONNECTION_EVENT_ESTABLISHED)
            with _resumed(b_node):
                a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 0xD0, b.lmr.remote(0, 8))
                a.ep.disconnect(CloseFlags.GRACEFUL)
                yield a


STATE_SUBTYPE = {
    EpState.RESERVED: DatReturnSubtype.INVALID_STATE_EP_RESERVED,
    EpState.ACTIVE_CONNECTION_PENDING: DatReturnSubtype.INVALID_STATE_EP_ACTCONNPENDING,
    EpState.PASSIVE_CONNECTION_PENDING: DatReturnSubtype.INVALID_STATE_EP_PASSCONNPENDING,
    EpState.TENTATIVE_CONNECTION_PENDING: DatReturnSubtype.INVALID_STATE_EP_TENTCONNPENDING,
    EpState.COMPLETION_PENDING: DatReturnSubtype.INVALID_STATE_EP_COMPLPENDING,
    EpState.DISCONNECT_PENDING: DatReturnSubtype.INVALID_STATE_EP_DISCPENDING,
}


@pytest.mark.parametrize("state", list(STATE_SUBTYPE), ids=lambda s: s.name)
def test_invalid_state_outside_connected_and_disconnected(
    two_nodes: tuple[Node, Node], state: EpState
) -> None:
    """RETURN VALUES: DAT_INVALID_STATE 'Endpoint was not in the a DAT_EP_STATE_CONNECTED or
    DAT_EP_STATE_DISCONNECTED state', with the subtype naming the state; the EP stays where
    it was and no completion is reported. (UNCONNECTED:
    test_valid_in_disconnected_then_flushed_invalid_state_otherwise.)"""
    with _ep_in(*two_nodes, state) as side:
        assert side.ep.state == state
        rmr = side.ia.rmr_create(side.pz)
        with refused(DatInvalidState, STATE_SUBTYPE[state]):
            rmr.bind(side.lmr, side.lmr.triplet(0, 64), RW, side.ep, cookie=1)
        assert side.ep.state == state
        _nothing_queued(side.evd)


def test_model_not_supported_for_a_zero_based_va_type(pair: Pair) -> None:
    """RETURN VALUES: DAT_MODEL_NOT_SUPPORTED 'The requested Model was not supported by the
    Provider': the 2.0 dat_rmr_bind with va_type DAT_VA_TYPE_ZB (datfabric offers only
    DAT_VA_TYPE_VA). The window keeps its binding and no completion is reported; with
    DAT_VA_TYPE_VA the same call binds."""
    rmr = _window(pair)
    context = _bind(pair, rmr, 0, 64)
    wait_event(pair.evd_b, E.RMR_BIND_COMPLETION_EVENT)
    out: Ref[int] = Ref()
    triplet = pair.lmr_b.triplet(512, 64)
    ret = dat_rmr_bind(rmr, pair.lmr_b, triplet, RW, VaType.ZB, pair.ep_b, 8, 0, out)
    assert_code(ret, DatModelNotSupported, Sub.NO_SUBTYPE)
    assert out.value is None
    assert rmr.query()["rmr_context"] == context
    pair.ia_b.query()
    _nothing_queued(pair.evd_b)
    assert _remote_write(pair, rmr.remote(0, 8)) == St.DTO_SUCCESS
    assert bytes(pair.view_b[0:8]) == b"windowed", "the old binding still holds"
    assert dat_rmr_bind(rmr, pair.lmr_b, triplet, RW, VaType.VA, pair.ep_b, 9, 0, out) == 0
    assert out.value not in (None, context)
    assert wait_event(pair.evd_b, E.RMR_BIND_COMPLETION_EVENT).cookie == 9
