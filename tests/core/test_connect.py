"""Connection setup and teardown: the handshake with private data both ways, every way a connect
fails, RSP and PROVIDER PSPs, graceful and abrupt disconnects, reset and reconnect, a consumer
that goes away and a node that crashes."""

from __future__ import annotations

import pytest

from proto.attrs import EpAttr
from proto.constants import CloseFlags, Dtos, EpState, PspFlags
from proto.constants import DatReturnSubtype as Sub
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.errors import DatInvalidState
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, address, connect, pair, side
from tests.core.harness import Fabric

DTO = E.DTO_COMPLETION_EVENT


def _two(fabric: Fabric | None = None) -> tuple[Fabric, Side, Side]:
    fabric = fabric or Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    return fabric, side(fabric, n1), side(fabric, n2)


def _state(s: Side) -> EpState:
    return s.c.core.eps[s.ep].state


def _write(a: Side, b: Side, cookie: int, at: int = 0, n: int = 16) -> None:
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(at, n)], cookie, b.rmr(at, n), 0)


def test_connect_and_accept_carry_private_data_both_ways() -> None:
    fabric, a, b = _two()
    request, est_a, est_b = connect(fabric, a, b, conn_qual=77)
    assert (request.conn_qual, request.private_data, request.remote_address) == (
        77,
        b"hi",
        "10.0.0.1:7000",
    )
    assert (est_a.ep, est_a.private_data) == (a.ep, b"ok")
    assert (est_b.ep, est_b.private_data) == (b.ep, b"")
    assert _state(a) == _state(b) == EpState.CONNECTED
    kinds = [name for _, _, name, _, _ in fabric.trace if name != "HELLO"]
    assert kinds == ["AUTH", "AUTH", "AUTH", "CONN_REQ", "CONN_ACCEPT", "CONN_RTU"]
    assert list(fabric.frames(FrameType.CONN_REQ)) == [("n1", "n2", [77, b"hi", 4, 4])]
    assert list(fabric.frames(FrameType.CONN_ACCEPT)) == [("n2", "n1", [b"ok", 4, 4])]


def test_reject_with_private_data_is_peer_rejected() -> None:
    _fabric, a, b = _two()
    b.c.call(b.c.core.psp_create(5, b.evd, PspFlags.CONSUMER))
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 5, 10_000_000, b"please"))
    (request,) = b.events()
    assert (request.event_number, request.private_data) == (E.CONNECTION_REQUEST_EVENT, b"please")
    b.c.call(b.c.core.cr_reject(request.cr, b"go away"))
    assert a.log() == [(E.CONNECTION_EVENT_PEER_REJECTED, b"go away")]
    assert b.log() == []
    assert _state(a) == EpState.DISCONNECTED
    assert _state(b) == EpState.UNCONNECTED, "b's EP was never part of it"


def test_no_listener_is_non_peer_rejected() -> None:
    fabric, a, b = _two()
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 404, 10_000_000, b"anyone?"))
    assert a.log() == [(E.CONNECTION_EVENT_NON_PEER_REJECTED, b"")]
    assert b.log() == []
    assert list(fabric.frames(FrameType.CONN_REJECT)) == [("n2", "n1", [False, b""])]


def test_nothing_on_the_port_is_unreachable() -> None:
    fabric, a, _ = _two()
    a.c.call(a.c.core.ep_connect(a.ep, ("10.0.0.1", 7999), 1, 10_000_000, b""))
    assert a.log() == [(E.CONNECTION_EVENT_UNREACHABLE, b"")]
    assert _state(a) == EpState.DISCONNECTED
    assert fabric.trace == []


def test_a_request_nobody_answers_times_out_exactly_at_the_timeout() -> None:
    fabric, a, b = _two()
    b.c.call(b.c.core.psp_create(5, b.evd, PspFlags.CONSUMER))
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 5, 2_500_000, b""))
    (request,) = b.events()  # b never answers
    fabric.advance(2.499)
    assert a.log() == [] and _state(a) == EpState.ACTIVE_CONNECTION_PENDING
    fabric.advance(0.001)
    assert a.log() == [(E.CONNECTION_EVENT_TIMED_OUT, b"")]
    assert _state(a) == EpState.DISCONNECTED
    # accepting the request the active side gave up on fails on the passive side
    b.c.call(b.c.core.cr_accept(request.cr, b.ep, b""))
    assert b.log() == [(E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, b"")]
    assert _state(b) == EpState.DISCONNECTED


def test_rsp_gives_the_request_its_reserved_ep_and_fires_once() -> None:
    fabric, a, b = _two()
    rsp = b.c.call(b.c.core.rsp_create(9, b.ep, b.evd))
    assert _state(b) == EpState.RESERVED
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 9, 10_000_000, b"rsp"))
    (request,) = b.events()
    assert (request.sp, request.ep, request.conn_qual, request.private_data) == (
        rsp,
        b.ep,
        9,
        b"rsp",
    )
    assert _state(b) == EpState.PASSIVE_CONNECTION_PENDING
    b.c.call(b.c.core.cr_accept(request.cr, None, b"yes"))
    assert a.log() == [(E.CONNECTION_EVENT_ESTABLISHED, b"yes")]
    assert b.log() == [(E.CONNECTION_EVENT_ESTABLISHED, b"")]
    # the RSP is gone: a second request on its conn_qual finds no listener
    other = side(fabric, a.c.node)
    other.c.call(other.c.core.ep_connect(other.ep, address(b.c.node), 9, 10_000_000, b""))
    assert other.log() == [(E.CONNECTION_EVENT_NON_PEER_REJECTED, b"")]


def test_psp_with_the_provider_flag_makes_the_ep_the_consumer_completes() -> None:
    fabric, a, b = _two()
    b.c.call(b.c.core.psp_create(6, b.evd, PspFlags.PROVIDER))
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 6, 10_000_000, b"p"))
    (request,) = b.events()
    made = request.ep
    assert made not in (0, b.ep)
    assert b.c.core.eps[made].state == EpState.TENTATIVE_CONNECTION_PENDING
    with pytest.raises(DatInvalidState) as refused:
        b.c.call(b.c.core.cr_accept(request.cr, None, b""))
    assert refused.value.code == DatInvalidState(Sub.INVALID_STATE_EP_NOTREADY).code
    changes = {"pz": b.pz, "recv_evd": b.evd, "request_evd": b.evd, "connect_evd": b.evd}
    b.c.call(b.c.core.ep_modify(made, changes))
    b.c.call(b.c.core.cr_accept(request.cr, None, b"made"))
    assert a.log() == [(E.CONNECTION_EVENT_ESTABLISHED, b"made")]
    [established] = b.events()
    assert (established.event_number, established.ep) == (E.CONNECTION_EVENT_ESTABLISHED, made)
    # the provider's EP carries data
    a.memory(0, 4)[:] = b"ping"
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 4)], 1, b.rmr(0, 4), 0)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_SUCCESS, 4)]
    assert bytes(b.memory(0, 4)) == b"ping"


def test_rejecting_a_provider_made_request_frees_its_ep() -> None:
    _fabric, a, b = _two()
    b.c.call(b.c.core.psp_create(6, b.evd, PspFlags.PROVIDER))
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 6, 10_000_000, b""))
    (request,) = b.events()
    b.c.call(b.c.core.cr_reject(request.cr, b"no"))
    assert request.ep not in b.c.core.eps and request.ep not in b.c.state.eps  # type: ignore[union-attr]
    assert a.log() == [(E.CONNECTION_EVENT_PEER_REJECTED, b"no")]


def test_graceful_disconnect_waits_for_the_outstanding_dtos() -> None:
    fabric, a, b = pair()
    add_rule(b.c, action="delay", op="ACK", delay_ms=100.0)  # b's ACKs arrive 0.1 s late
    a.memory(0, 16)[:] = bytes(range(16))
    _write(a, b, 1)
    _write(a, b, 2, at=16)
    a.c.call(a.c.core.ep_disconnect(a.ep, CloseFlags.GRACEFUL))
    assert bytes(b.memory(0, 16)) == bytes(range(16)), "the writes executed"
    assert a.log() == [] and _state(a) == EpState.DISCONNECT_PENDING
    assert b.log() == []
    fabric.advance(0.099)
    assert a.log() == []
    fabric.advance(0.001)
    assert a.log() == [
        (DTO, 1, St.DTO_SUCCESS, 16),
        (DTO, 2, St.DTO_SUCCESS, 16),
        (E.CONNECTION_EVENT_DISCONNECTED, b""),
    ]
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b"")]
    assert _state(a) == _state(b) == EpState.DISCONNECTED


def test_graceful_disconnect_with_nothing_outstanding_is_at_once() -> None:
    _fabric, a, b = pair()
    a.c.call(a.c.core.ep_disconnect(a.ep, CloseFlags.GRACEFUL))
    assert a.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b"")]
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b"")]


def test_abrupt_disconnect_flushes_the_outstanding_dtos_after_the_event() -> None:
    fabric, a, b = pair()
    _write(a, b, 1)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(64, 16)], 2, b.rmr(64, 16), 0)
    a.c.post(Dtos.RECEIVE, a.ep, [a.triplet(128, 16)], 3, None, 0)
    a.c.call(a.c.core.ep_disconnect(a.ep, CloseFlags.ABRUPT))
    assert a.log() == [
        (E.CONNECTION_EVENT_DISCONNECTED, b""),
        (DTO, 1, St.DTO_ERR_FLUSHED, 0),
        (DTO, 2, St.DTO_ERR_FLUSHED, 0),
        (DTO, 3, St.DTO_ERR_FLUSHED, 0),
    ]
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b"")]
    # a post on the DISCONNECTED endpoint is accepted, then flushed
    _write(a, b, 4)
    fabric.run()
    assert a.log() == [(DTO, 4, St.DTO_ERR_FLUSHED, 0)]
    assert a.c.core.eps[a.ep].requests == 0


def test_the_passive_side_disconnects_and_the_active_side_flushes() -> None:
    fabric, a, b = pair()
    _write(a, b, 1)  # on the wire when b disconnects: b never executes it
    b.c.call(b.c.core.ep_disconnect(b.ep, CloseFlags.ABRUPT), run=False)
    fabric.run()
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b"")]
    assert a.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 1, St.DTO_ERR_FLUSHED, 0)]


def test_reset_then_reconnect_starts_the_sequence_afresh() -> None:
    fabric, a, b = pair()
    _write(a, b, 1)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_SUCCESS, 16)]
    a.c.call(a.c.core.ep_disconnect(a.ep, CloseFlags.ABRUPT))
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b"")]
    a.log()
    a.c.call(a.c.core.ep_reset(a.ep))
    b.c.call(b.c.core.ep_reset(b.ep))
    assert _state(a) == _state(b) == EpState.UNCONNECTED
    connect(fabric, a, b, psp=False)  # the PSP of conn_qual 1 still listens
    a.memory(0, 5)[:] = b"again"
    _write(a, b, 2, n=5)
    fabric.run()
    assert a.log() == [(DTO, 2, St.DTO_SUCCESS, 5)]
    assert bytes(b.memory(0, 5)) == b"again"
    writes = [fields for _, _, fields in fabric.frames(FrameType.WRITE)]
    assert [w[0] for w in writes] == [1, 1], "each connection numbers its requests from 1"


def test_reset_is_refused_while_connected() -> None:
    _, a, _ = pair()
    with pytest.raises(DatInvalidState) as refused:
        a.c.call(a.c.core.ep_reset(a.ep))
    assert refused.value.code == DatInvalidState(Sub.INVALID_STATE_EP_CONNECTED).code


def test_a_consumer_that_goes_away_disconnects_its_peer() -> None:
    fabric, a, b = pair()
    _write(b, a, 7)  # b's write is on the wire when a goes away
    a.c.close()
    fabric.run()
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 7, St.DTO_ERR_FLUSHED, 0)]
    assert _state(b) == EpState.DISCONNECTED
    assert a.c.node.nic.consumers == {}
    assert a.c.node.nic.wire.links == {} and b.c.node.nic.wire.links == {}


def test_a_daemon_that_stops_closes_its_ias_first_and_its_peers_see_a_disconnect() -> None:
    """Nic.shutdown (SIGTERM, before the daemon unmaps its consumers' memory): each IA closes
    as its consumer's death would (the EPs disconnect), then every peer stream is reset;
    what its peers send after that reaches no EP and no event queue of the stopped node."""
    fabric, a, b = pair()
    _write(b, a, 7)  # b's write is on the wire as a's daemon stops
    a.c.node.nic.shutdown("the daemon is stopping")
    fabric.run()
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 7, St.DTO_ERR_FLUSHED, 0)]
    assert a.c.state is not None and a.c.state.closed and a.c.state.evds == {}
    assert a.c.node.nic.consumers == {} and a.c.node.nic.wire.links == {}
    assert b.c.node.nic.wire.links == {}


def test_a_consumer_that_goes_away_before_accepting_refuses_the_request() -> None:
    fabric, a, b = _two()
    b.c.call(b.c.core.psp_create(5, b.evd, PspFlags.CONSUMER))
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 5, 10_000_000, b""))
    assert b.numbers() == [E.CONNECTION_REQUEST_EVENT]
    b.c.close()
    fabric.run()
    assert a.log() == [(E.CONNECTION_EVENT_NON_PEER_REJECTED, b"")]


@pytest.mark.parametrize("how", ["fabric", "admin"])
def test_a_crashed_node_breaks_every_peer_and_completes_each_dto_once(how: str) -> None:
    fabric = Fabric()
    n1, n2, n3 = (fabric.add_node(n) for n in ("n1", "n2", "n3"))
    a, b, c, b2 = side(fabric, n1), side(fabric, n2), side(fabric, n3), side(fabric, n2)
    connect(fabric, a, b, conn_qual=1)
    connect(fabric, c, b2, conn_qual=2)
    if how == "admin":
        b.c.admin("node_status", [])  # the admin connection is open before the traffic
    b.memory(0, 8)[:] = b"survives"
    for cookie in (1, 2):
        _write(a, b, cookie)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(64, 8)], 3, b.rmr(0, 8), 0)
    a.c.post(Dtos.RECEIVE, a.ep, [a.triplet(128, 16)], 4, None, 0)
    _write(c, b2, 5)
    if how == "fabric":
        fabric.crash(n2)
    else:
        b.c.admin("node_crash", [], run=False)
    fabric.run()
    fabric.advance(30.0)
    assert a.log() == [
        (DTO, 1, St.DTO_ERR_TRANSPORT, 0),
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 2, St.DTO_ERR_FLUSHED, 0),
        (DTO, 3, St.DTO_ERR_FLUSHED, 0),
        (DTO, 4, St.DTO_ERR_FLUSHED, 0),
    ]
    assert c.log() == [(DTO, 5, St.DTO_ERR_TRANSPORT, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(a.memory(64, 8)) == bytes(8), "the read never landed"
    assert a.c.core.eps[a.ep].requests == 0 and a.c.core.eps[a.ep].recvs == 0
    assert _state(a) == _state(c) == EpState.DISCONNECTED


def test_a_crashed_node_with_nothing_outstanding_is_broken_without_completions() -> None:
    fabric, a, b = pair()
    fabric.crash(b.c.node)
    fabric.run()
    assert a.log() == [(E.CONNECTION_EVENT_BROKEN, b"")]


def test_a_crash_with_4096_writes_outstanding_completes_every_one_once() -> None:
    """Flushing a deep queue: every completion reaches the consumer, in posting order (none is
    lost to an event batch bigger than a frame or a ring can carry)."""
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    attr = EpAttr(max_request_dtos=4096)
    a, b = side(fabric, n1, attr=attr, qlen=8192), side(fabric, n2, attr=attr, qlen=8192)
    connect(fabric, a, b)
    for cookie in range(1, 4097):
        _write(a, b, cookie)
    fabric.crash(n2)
    fabric.run()
    fabric.advance(30.0)
    log = a.log()
    dtos = [entry for entry in log if entry[0] == DTO]
    assert [entry[1] for entry in dtos] == list(range(1, 4097))
    assert {entry[2] for entry in dtos[1:]} == {St.DTO_ERR_FLUSHED}
    assert (E.CONNECTION_EVENT_BROKEN, b"") in log
