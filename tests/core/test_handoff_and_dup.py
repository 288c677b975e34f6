"""dat_cr_handoff and dat_ep_dup_connect in memory: a request handed to another listener of the
node (another PSP of the IA, another IA's PSP, an RSP) arrives there as a new CR while the
caller's is gone; a duplicated connect reaches the listener the original EP connected to."""

from __future__ import annotations

import pytest

from proto.constants import DatReturnSubtype as Sub
from proto.constants import EpState, EvdFlags, PspFlags
from proto.constants import EventNumber as E
from proto.errors import (
    DatError,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatModelNotSupported,
)
from tests.core.flows import Side, address, connect, raw, side
from tests.core.harness import Fabric, SimConsumer

REQ, EST = E.CONNECTION_REQUEST_EVENT, E.CONNECTION_EVENT_ESTABLISHED


def _code(err: pytest.ExceptionInfo[DatError]) -> int:
    return err.value.code & 0xFFFF


def _listen(c: SimConsumer, qual: int, flags: PspFlags = PspFlags.CONSUMER) -> int:
    evd: int = c.call(c.core.evd_create(8, EvdFlags.DEFAULT))
    c.call(c.core.psp_create(qual, evd, flags))
    return evd


def _request(fabric: Fabric, a: Side, b: Side, qual: int, pdata: bytes = b"hi") -> None:
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), qual, 10_000_000, pdata))
    fabric.run()


def _two() -> tuple[Fabric, Side, Side]:
    fabric = Fabric()
    return fabric, side(fabric, fabric.add_node("n1")), side(fabric, fabric.add_node("n2"))


def test_a_request_handed_to_another_psp_of_the_ia_arrives_there() -> None:
    fabric, a, b = _two()
    first, second = _listen(b.c, 10), _listen(b.c, 11)
    _request(fabric, a, b, 10, b"pd")
    (request,) = b.c.events(first)
    b.c.call(b.c.core.cr_handoff(request.cr, 11))
    assert request.cr not in b.c.core.crs
    with pytest.raises(DatInvalidHandle) as gone:
        b.c.call(raw("cr_accept", request.cr, b.ep, b""))
    assert _code(gone) == Sub.INVALID_HANDLE_CR, "the caller's CR is destroyed"
    (handed,) = b.c.events(second)
    assert (handed.event_number, handed.conn_qual, handed.private_data) == (REQ, 11, b"pd")
    assert handed.cr != request.cr and handed.remote_address == request.remote_address
    b.c.call(b.c.core.cr_accept(handed.cr, b.ep, b"ok"))
    fabric.run()
    assert a.log() == [(EST, b"ok")] and b.log() == [(EST, b"")]


def test_a_request_handed_to_another_ia_of_the_node_is_that_ias() -> None:
    fabric, a, b = _two()
    c = side(fabric, b.c.node)
    evd = _listen(b.c, 20)
    theirs = _listen(c.c, 21)
    _request(fabric, a, b, 20)
    (request,) = b.c.events(evd)
    b.c.call(b.c.core.cr_handoff(request.cr, 21))
    (handed,) = c.c.events(theirs)
    assert (handed.event_number, handed.conn_qual) == (REQ, 21)
    c.c.call(c.c.core.cr_accept(handed.cr, c.ep, b""))
    fabric.run()
    assert a.numbers() == [EST] and c.numbers() == [EST]
    assert b.c.core.crs == {} and b.numbers() == []


def test_a_provider_eps_request_handed_to_an_rsp() -> None:
    """The PROVIDER PSP's EP is freed as on dat_cr_reject; the RSP's EP takes the request."""
    fabric, a, b = _two()
    evd = _listen(b.c, 30, PspFlags.PROVIDER)
    core = b.c.core
    ep2 = b.c.call(core.ep_create(b.pz, b.evd, b.evd, b.evd, None))
    b.c.call(core.rsp_create(31, ep2, b.evd))
    _request(fabric, a, b, 30)
    (request,) = b.c.events(evd)
    made = request.ep
    assert core.eps[made].state == EpState.TENTATIVE_CONNECTION_PENDING
    b.c.call(core.cr_handoff(request.cr, 31))
    assert made not in core.eps and made not in b.c.node.nic.consumers[b.c.state.id].eps  # type: ignore[union-attr]
    (handed,) = b.events()
    assert (handed.conn_qual, handed.ep) == (31, ep2)
    assert core.eps[ep2].state == EpState.PASSIVE_CONNECTION_PENDING
    b.c.call(core.cr_accept(handed.cr, None, b""))
    fabric.run()
    assert a.numbers() == [EST] and b.numbers() == [EST]


def test_an_rsps_ep_goes_back_to_unconnected_when_its_request_is_handed_off() -> None:
    fabric, a, b = _two()
    core = b.c.core
    b.c.call(core.rsp_create(40, b.ep, b.evd))
    other = _listen(b.c, 41)
    _request(fabric, a, b, 40)
    (request,) = b.events()
    assert core.eps[b.ep].state == EpState.PASSIVE_CONNECTION_PENDING
    b.c.call(core.cr_handoff(request.cr, 41))
    assert core.eps[b.ep].state == EpState.UNCONNECTED
    (handed,) = b.c.events(other)
    b.c.call(core.cr_accept(handed.cr, b.ep, b""))  # the same EP, now UNCONNECTED, takes it
    fabric.run()
    assert a.numbers() == [EST] and b.numbers() == [EST]


def test_handoff_errors_change_nothing() -> None:
    fabric, a, b = _two()
    evd = _listen(b.c, 50)
    _request(fabric, a, b, 50)
    (request,) = b.c.events(evd)
    for qual in (50, 404):  # its own conn_qual; one nobody listens on
        with pytest.raises(DatInvalidParameter) as err:
            b.c.call(b.c.core.cr_handoff(request.cr, qual))
        assert _code(err) == Sub.INVALID_ARG2
    with pytest.raises(DatInvalidParameter) as neg:
        b.c.call(b.c.core.cr_handoff(request.cr, -1))
    assert _code(neg) == Sub.INVALID_ARG2
    with pytest.raises(DatInvalidParameter):
        b.c.call(raw("cr_handoff", request.cr, -1))
    for call in (b.c.core.cr_handoff(12345, 51), raw("cr_handoff", 12345, 51)):
        with pytest.raises(DatInvalidHandle) as handle:
            b.c.call(call)
        assert _code(handle) == Sub.INVALID_HANDLE_CR
    b.c.call(b.c.core.cr_accept(request.cr, b.ep, b""))  # still the caller's
    fabric.run()
    assert a.numbers() == [EST]


def test_handoff_to_a_full_backlog_is_refused() -> None:
    fabric, a, b = _two()
    evd = _listen(b.c, 60)
    busy = b.c.call(b.c.core.evd_create(1, EvdFlags.DEFAULT))
    b.c.call(b.c.core.psp_create(61, busy, PspFlags.CONSUMER))
    other = side(fabric, a.c.node)
    _request(fabric, other, b, 61)  # the backlog of 1 is taken
    _request(fabric, a, b, 60)
    (request,) = b.c.events(evd)
    with pytest.raises(DatInvalidParameter) as err:
        b.c.call(b.c.core.cr_handoff(request.cr, 61))
    assert _code(err) == Sub.INVALID_ARG2 and request.cr in b.c.core.crs


def test_dup_connect_reaches_the_listener_of_the_duplicated_ep() -> None:
    fabric, a, b = _two()
    connect(fabric, a, b, conn_qual=70)  # its PSP stays
    core = a.c.core
    ep2 = a.c.call(core.ep_create(a.pz, a.evd, a.evd, a.evd, None))
    a.c.call(core.ep_dup_connect(ep2, a.ep, 10_000_000, b"again"), run=False)
    assert core.eps[ep2].state == EpState.ACTIVE_CONNECTION_PENDING
    fabric.run()
    (request,) = b.events()
    assert (request.conn_qual, request.private_data) == (70, b"again")
    ep_b2 = b.c.call(b.c.core.ep_create(b.pz, b.evd, b.evd, b.evd, None))
    b.c.call(b.c.core.cr_accept(request.cr, ep_b2, b""))
    fabric.run()
    assert [(e.event_number, e.ep) for e in a.events()] == [(EST, ep2)]
    assert core.eps[ep2].state == EpState.CONNECTED


def test_dup_connect_errors() -> None:
    fabric, a, b = _two()
    core = a.c.core
    ep2 = a.c.call(core.ep_create(a.pz, a.evd, a.evd, a.evd, None))
    with pytest.raises(DatInvalidState) as unconnected:
        a.c.call(core.ep_dup_connect(ep2, a.ep, 10_000_000, b""))
    assert _code(unconnected) == Sub.INVALID_STATE_EP_UNCONNECTED, "dup_ep is not connected"
    connect(fabric, a, b, conn_qual=80)
    with pytest.raises(DatInvalidHandle) as handle:
        a.c.call(raw("ep_dup_connect", ep2, 0xDEAD, 1000, b""))
    assert _code(handle) == Sub.INVALID_HANDLE_EP
    for timeout in (0, -5):
        with pytest.raises(DatInvalidParameter) as err:
            a.c.call(core.ep_dup_connect(ep2, a.ep, timeout, b""))
        assert _code(err) == Sub.INVALID_ARG3
        with pytest.raises(DatInvalidParameter) as err:
            a.c.call(raw("ep_dup_connect", ep2, a.ep, timeout, b""))
        assert _code(err) == Sub.INVALID_ARG3
    with pytest.raises(DatInvalidParameter) as pdata:
        a.c.call(raw("ep_dup_connect", ep2, a.ep, 1000, bytes(4096)))
    assert _code(pdata) == Sub.INVALID_ARG5
    with pytest.raises(DatInvalidState) as busy:
        a.c.call(core.ep_dup_connect(a.ep, a.ep, 1000, b""))
    assert _code(busy) == Sub.INVALID_STATE_EP_CONNECTED, "the EP itself must be UNCONNECTED"
    b2 = b.c.call(b.c.core.ep_create(b.pz, b.evd, b.evd, b.evd, None))
    with pytest.raises(DatModelNotSupported):
        b.c.call(b.c.core.ep_dup_connect(b2, b.ep, 1000, b""))  # b.ep accepted its connection
    assert a.c.core.eps[ep2].state == EpState.UNCONNECTED and b.numbers() == []
