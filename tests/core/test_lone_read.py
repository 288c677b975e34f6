"""An RDMA Read posted while none of its EP's requests is outstanding (runs.lone): its READ_REQ
leaves as it is taken, and it completes as a row when its answer has landed whole. Only its
answer completes it: an ACK or a NAK that would acknowledge it first breaks the link (the target
executes in order, so its READ_RESP comes before either); a shorter answer completes it with
that length; a flush completes it as any other request."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fabricd import _lanes as lanes
from fabricd.nic.objects import Ep
from fabricd.nic.runs import Run
from proto.constants import CloseFlags, Dtos
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, pair
from tests.core.harness import Fabric, inject

OK = St.DTO_SUCCESS
DTO = E.DTO_COMPLETION_EVENT
BROKEN = E.CONNECTION_EVENT_BROKEN


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether each call of the target's Read lane in C (_lanes.c's serve, which
    Responder.serve calls through its module) answered the request."""
    calls: list[bool] = []
    serve: Callable[..., tuple[int, bytes | None]] = lanes.serve

    def counted(*args: Any) -> tuple[int, bytes | None]:
        out = serve(*args)
        calls.append(out[1] is not None)
        return out

    monkeypatch.setattr(lanes, "serve", counted)
    yield calls


def _ep(side: Side) -> Ep:
    """The side's EP as its daemon holds it."""
    ep = next(iter(side.c.node.nic.wire.links.values())).ep
    assert ep is not None
    return ep


def _held_read(length: int = 64) -> tuple[Fabric, Side, Side]:
    """A pair whose first request, a lone Read of ``length`` bytes at ``b``'s start (cookie
    1), is on the wire and its answer held back for 100 ms by a rule at the target."""
    fabric, a, b = pair()
    b.memory()[:] = bytes(range(256)) * 16
    add_rule(b.c, action="delay", op="READ_RESP", delay_ms=100.0)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, length)], 1, b.rmr(0, length), 0)
    fabric.run()
    assert a.log() == []
    assert [type(item) for item in _ep(a).ops] == [Run]  # runs.lone's, not an Op
    return fabric, a, b


def test_a_lone_read_completes_with_its_bytes_and_length(served: list[bool]) -> None:
    """The first Read on the link takes the long way at the target, whose checks keep its
    key (lane.read_grants); the next ones are answered in C."""
    fabric, a, b = pair()
    b.memory()[:] = bytes(range(256)) * 16
    for i in range(3):
        a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 48)], i, b.rmr(64 * i, 48), 0)
        fabric.run()
        assert a.log() == [(DTO, i, OK, 48)]
        assert bytes(a.memory(0, 48)) == bytes(b.memory(64 * i, 48))
    assert served == [True, True]


def test_writes_posted_behind_a_lone_read_complete_after_it() -> None:
    fabric, a, b = _held_read()
    a.memory(64, 16)[:] = b"W" * 16
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(64, 16)], 2, b.rmr(1024, 16), 0)
    fabric.run()
    assert a.log() == []  # the Write's ACK came; the Read before it has no answer yet
    fabric.advance(0.1)
    assert a.log() == [(DTO, 1, OK, 64), (DTO, 2, OK, 16)]
    assert bytes(a.memory(0, 64)) == bytes(range(64))
    assert bytes(b.memory(1024, 16)) == b"W" * 16


def test_an_ack_of_a_lone_read_before_its_answer_breaks_the_link() -> None:
    fabric, a, b = _held_read()
    inject(fabric.pipe(b.c.node, a.c.node), FrameType.ACK, 1)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_ERR_TRANSPORT, 0), (BROKEN, b"")]
    fabric.advance(0.1)
    assert bytes(a.memory(0, 64)) == bytes(64)  # its answer, after, lands nowhere


def test_a_nak_past_a_lone_read_before_its_answer_breaks_the_link() -> None:
    fabric, a, b = _held_read()
    inject(fabric.pipe(b.c.node, a.c.node), FrameType.NAK, 2, St.DTO_ERR_REMOTE_ACCESS)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_ERR_TRANSPORT, 0), (BROKEN, b"")]


def test_a_shorter_answer_completes_a_lone_read_with_its_length() -> None:
    fabric, a, b = _held_read()
    inject(fabric.pipe(b.c.node, a.c.node), FrameType.READ_RESP, 1, payload=b"S" * 32)
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 32)]
    assert bytes(a.memory(0, 64)) == b"S" * 32 + bytes(32)
    fabric.advance(0.1)  # the real answer, a duplicate now: dropped
    assert a.log() == []
    assert bytes(a.memory(0, 64)) == b"S" * 32 + bytes(32)


def test_a_lone_read_outstanding_at_an_abrupt_disconnect_is_flushed() -> None:
    fabric, a, _ = _held_read()
    a.c.call(a.c.core.ep_disconnect(a.ep, CloseFlags.ABRUPT))
    fabric.run()
    assert a.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 1, St.DTO_ERR_FLUSHED, 0)]
    fabric.advance(0.1)
    assert bytes(a.memory(0, 64)) == bytes(64)
