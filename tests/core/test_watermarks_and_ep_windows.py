"""dat_ep_set_watermark, dat_ep_recv_query and dat_rmr_create_for_ep in memory: a soft high
watermark passed by the EP's receive buffers gives one async event per setting, a hard one
breaks the connection; the receive counts; a window of EP scope is reachable only through the
connection of the EP it was bound on."""

from __future__ import annotations

import pytest

from proto.constants import DatReturnSubtype as Sub
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, EpAsyncErrorReason, EpState, MemPriv, PspFlags
from proto.constants import EventNumber as E
from proto.errors import DatInvalidParameter
from proto.hostif import ASYNC_EVD
from tests.core.flows import Side, address, connect, pair, raw, side
from tests.core.harness import Fabric

SOFT = EpAsyncErrorReason.SRQ_SOFT_HIGH_WATERMARK_EVENT
DTO = E.DTO_COMPLETION_EVENT
RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE


def _recv(s: Side, cookie: int) -> None:
    s.c.post(Dtos.RECEIVE, s.ep, [s.triplet(64 * cookie, 64)], cookie, None, 0)
    s.c.fabric.run()


def _async(s: Side) -> list[tuple[E, int, int]]:
    return [(e.event_number, e.handle, e.reason) for e in s.c.events(ASYNC_EVD)]


def test_a_soft_watermark_gives_one_async_event_per_setting() -> None:
    fabric, a, b = pair()
    b.c.call(b.c.core.ep_set_watermark(b.ep, 2, -1))
    for cookie in (1, 2):
        _recv(b, cookie)
    assert _async(b) == [], "two buffers do not exceed a watermark of two"
    _recv(b, 3)
    assert _async(b) == [(E.ASYNC_ERROR_EP_BROKEN, b.ep, SOFT)]
    _recv(b, 4)
    assert _async(b) == [], "once per setting"
    assert b.c.core.eps[b.ep].state == EpState.CONNECTED, "a soft watermark breaks nothing"
    b.c.call(b.c.core.ep_set_watermark(b.ep, 3, -1))
    assert _async(b) == [(E.ASYNC_ERROR_EP_BROKEN, b.ep, SOFT)], "set below the count: at once"
    assert b.c.core.ep_recv_query(b.ep) == (4, 4)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 8)], 9, None, 0)
    fabric.run()
    assert [e.cookie for e in b.events()] == [1]
    assert b.c.core.ep_recv_query(b.ep) == (3, 3), "a completed receive is no longer counted"


def test_a_hard_watermark_breaks_the_connection() -> None:
    _fabric, a, b = pair()
    b.c.call(b.c.core.ep_set_watermark(b.ep, -1, 1))
    _recv(b, 1)
    assert b.log() == []
    _recv(b, 2)
    assert b.log() == [
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 1, St.DTO_ERR_FLUSHED, 0),
        (DTO, 2, St.DTO_ERR_FLUSHED, 0),
    ]
    assert a.numbers() == [E.CONNECTION_EVENT_DISCONNECTED]
    assert _async(b) == []


def test_a_hard_watermark_already_passed_acts_once_the_connection_is_made() -> None:
    fabric = Fabric()
    a, b = side(fabric, fabric.add_node("n1")), side(fabric, fabric.add_node("n2"))
    b.c.call(b.c.core.ep_set_watermark(b.ep, -1, 0))
    _recv(b, 1)  # before the connection: no connection to break
    assert b.c.core.eps[b.ep].state == EpState.UNCONNECTED and b.log() == []
    b.c.call(b.c.core.psp_create(3, b.evd, PspFlags.CONSUMER))
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 3, 10_000_000, b""))
    (request,) = b.events()
    b.c.call(b.c.core.cr_accept(request.cr, b.ep, b""))
    fabric.run()
    assert b.log() == [
        (E.CONNECTION_EVENT_ESTABLISHED, b""),
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 1, St.DTO_ERR_FLUSHED, 0),
    ]
    assert b.c.core.eps[b.ep].state == EpState.DISCONNECTED


def test_watermark_argument_errors() -> None:
    _fabric, _a, b = pair()
    core = b.c.core
    for soft, hard, sub in ((-2, -1, Sub.INVALID_ARG2), (0, -7, Sub.INVALID_ARG3)):
        for call in (
            core.ep_set_watermark(b.ep, soft, hard),
            raw("ep_set_watermark", b.ep, soft, hard),
        ):
            with pytest.raises(DatInvalidParameter) as err:
                b.c.call(call)
            assert err.value.code & 0xFFFF == sub
    b.c.call(core.ep_set_watermark(b.ep, 0, 0))  # zero is a watermark too
    b.c.call(core.ep_set_watermark(b.ep, -1, -1))  # DAT_WATERMARK_INFINITE: none
    _recv(b, 1)
    assert _async(b) == [] and b.numbers() == []


def test_a_window_of_ep_scope_is_reachable_only_through_its_ep() -> None:
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    a, b = side(fabric, n1), side(fabric, n2)
    connect(fabric, a, b, conn_qual=1)
    c = side(fabric, n1)
    core = b.c.core
    b2 = core.ep_create(b.pz, b.evd, b.evd, b.evd, None)
    b_other = Side(b.c, b.pz, b.evd, b.c.call(b2), b.address, b.size, b.lmr)
    connect(fabric, c, b_other, conn_qual=2)
    windows = {}
    for for_ep in (True, False):
        rmr = b.c.call(core.rmr_create(b.pz, for_ep))
        windows[for_ep] = b.c.call(
            core.rmr_bind(rmr, b.lmr.handle, b.triplet(0, 64), RW, b.ep, 0, 0)
        )
    assert sorted(core.rmrs.values()) == [False, True]
    b.events()
    for s, key, status in (
        (a, windows[True], St.DTO_SUCCESS),  # through b.ep's connection
        (c, windows[False], St.DTO_SUCCESS),  # a window of PZ scope: any EP of the PZ
        (c, windows[True], St.DTO_ERR_REMOTE_ACCESS),  # through another EP of b
    ):
        s.c.post(Dtos.RDMA_WRITE, s.ep, [s.triplet(0, 8)], 5, [b.address, 8, key], 0)
        fabric.run()
        assert [e.status for e in s.events() if e.event_number == DTO] == [status]
