"""Small Sends to one peer travel batched (one SENDS frame: one header listing their lengths, then
their bytes), and every RC rule holds per Send: each lands in its own receive, in order, with
one cumulative ACK; a Send that finds no receive holds the rest of its batch until receives
come; one too long for its receive stops the batch there; a duplicate consumes no receive; a
malformed batch closes only its stream."""

from __future__ import annotations

from typing import Any

import pytest

from proto.batch import MAX_OPS
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos
from proto.constants import EventNumber as E
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, connect, pair, side
from tests.core.harness import Fabric, inject

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
BROKEN = (E.CONNECTION_EVENT_BROKEN, b"")


def _sent(fabric: Fabric, kind: FrameType) -> list[list[Any]]:
    return [fields for _, _, fields in fabric.frames(kind)]


def _receives(b: Side, count: int, first: int = 0, n: int = 16) -> None:
    for i in range(first, first + count):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(n * i, n)], 100 + i, None, 0)


def _burst(fabric: Fabric, a: Side, count: int, n: int = 16) -> None:
    """One Send that leaves first (it rings the doorbell; a SENDS frame of one), then ``count``
    posted in one turn; Send ``i`` carries ``n`` bytes of value ``i``."""
    for i in range(count + 1):
        a.memory(n * i, n)[:] = bytes([i]) * n
        a.c.post(Dtos.SEND, a.ep, [a.triplet(n * i, n)], i, None, 0)
    fabric.run()


def _landed(b: Side, count: int, n: int = 16) -> list[bytes]:
    return [bytes(b.memory(n * i, n)) for i in range(count)]


def test_sends_posted_in_one_turn_leave_as_one_frame_and_land_in_their_receives() -> None:
    fabric, a, b = pair()
    _receives(b, 6)
    fabric.run()
    _burst(fabric, a, 5)
    assert _sent(fabric, FrameType.SEND) == []
    assert _sent(fabric, FrameType.SENDS) == [[1, [16]], [2, [16] * 5]]
    assert _landed(b, 6) == [bytes([i]) * 16 for i in range(6)]
    assert _sent(fabric, FrameType.ACK) == [[1], [6]], "one cumulative ACK for the batch"
    assert a.log() == [(DTO, i, OK, 16) for i in range(6)]
    assert b.log() == [(DTO, 100 + i, OK, 16) for i in range(6)]


def test_a_batch_that_runs_out_of_receives_holds_the_rest_until_receives_are_posted() -> None:
    """A receiver that posts one receive at a time, after the last completed, is served: the
    Sends of the batch past the receives wait, they are not lost or refused."""
    fabric, a, b = pair()
    _receives(b, 2)
    fabric.run()
    _burst(fabric, a, 4)
    assert b.log() == [(DTO, 100, OK, 16), (DTO, 101, OK, 16)]
    assert [c for _, c, _, _ in a.log()] == [0, 1]
    for i in range(2, 5):
        _receives(b, 1, first=i)
        fabric.run()
        assert b.log() == [(DTO, 100 + i, OK, 16)]
    assert _landed(b, 5) == [bytes([i]) * 16 for i in range(5)]
    assert [c for _, c, _, _ in a.log()] == [2, 3, 4]


def test_a_send_too_long_for_its_receive_stops_the_batch_there() -> None:
    fabric, a, b = pair()
    b.memory()[:] = b"\xbb" * 4096
    _receives(b, 2)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(32, 8)], 102, None, 0)  # too short for Send 2
    _receives(b, 2, first=3)
    fabric.run()
    _burst(fabric, a, 4)
    assert _sent(fabric, FrameType.SENDS) == [[1, [16]], [2, [16] * 4]]
    assert a.log() == [
        (DTO, 0, OK, 16),
        (DTO, 1, OK, 16),
        (DTO, 2, St.DTO_ERR_REMOTE_RESPONDER, 0),
        BROKEN,
        (DTO, 3, St.DTO_ERR_FLUSHED, 0),
        (DTO, 4, St.DTO_ERR_FLUSHED, 0),
    ]
    assert b.log()[:4] == [
        (DTO, 100, OK, 16),
        (DTO, 101, OK, 16),
        (DTO, 102, St.DTO_ERR_LOCAL_LENGTH, 0),
        BROKEN,
    ]
    assert bytes(b.memory(48, 32)) == b"\xbb" * 32, "nothing landed after the failed Send"


def test_a_duplicated_batch_consumes_no_receive_and_a_partly_seen_one_only_the_rest() -> None:
    fabric, a, b = pair()
    _receives(b, 5)
    fabric.run()
    _burst(fabric, a, 2)
    assert [c for _, c, _, _ in b.log()] == [100, 101, 102]
    pipe = fabric.pipe(a.c.node, b.c.node)
    inject(pipe, FrameType.SENDS, 2, [16, 16], payload=b"C" * 32)  # seen: answered only
    fabric.run()
    assert b.log() == [] and _sent(fabric, FrameType.ACK)[-1] == [3]
    assert _landed(b, 3) == [bytes([i]) * 16 for i in range(3)]
    # seq 3 seen, seq 4 new: only the second consumes a receive (the initiator never sent 4,
    # so the ACK of it then breaks the link there)
    inject(pipe, FrameType.SENDS, 3, [16, 16], payload=b"D" * 16 + b"E" * 16)
    fabric.run()
    assert b.log()[:1] == [(DTO, 103, OK, 16)]
    assert bytes(b.memory(48, 16)) == b"E" * 16
    assert _sent(fabric, FrameType.ACK)[-1] == [4]


BAD_BATCHES: dict[str, tuple[list[Any], bytes]] = {
    "payload longer than the Sends": ([2, [16]], b"x" * 17),
    "payload shorter than the Sends": ([2, [16, 16]], b"x" * 16),
    "no Sends": ([2, []], b""),
    "a negative length": ([2, [-1]], b""),
    "a string length": ([2, ["16"]], b"x" * 16),
    "lengths not a list": ([2, {"a": 1}], b""),
    "seq not an int": (["2", [16]], b"x" * 16),
    "seq zero": ([0, [16]], b"x" * 16),
    "too many Sends": ([2, [0] * (MAX_OPS + 1)], b""),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_a_malformed_batch_closes_its_stream_and_breaks_only_its_connection(case: str) -> None:
    """The other connection between the same two nodes carries on."""
    fabric, a, b = pair()
    hit = fabric.pipe(a.c.node, b.c.node)
    a2, b2 = side(fabric, a.c.node), side(fabric, b.c.node)
    connect(fabric, a2, b2, conn_qual=2)
    b.memory()[:] = b"\xbb" * 4096
    _receives(b, 2)
    _receives(b2, 1)
    fabric.run()
    fields, payload = BAD_BATCHES[case]
    inject(hit, FrameType.SENDS, *fields, payload=payload)
    fabric.run()
    assert bytes(b.memory()) == b"\xbb" * 4096, "nothing landed"
    assert b.log()[0] == BROKEN and a.log() == [BROKEN]
    [(src, _, [reason])] = fabric.frames(FrameType.ERROR)
    assert src == "n2" and ("SENDS" in reason or "Sends" in reason), reason
    a2.memory(0, 16)[:] = b"s" * 16
    a2.c.post(Dtos.SEND, a2.ep, [a2.triplet(0, 16)], 7, None, 0)
    fabric.run()
    assert (a2.log(), b2.log()) == ([(DTO, 7, OK, 16)], [(DTO, 100, OK, 16)])
    assert bytes(b2.memory(0, 16)) == b"s" * 16


def test_no_send_batching_while_fault_rules_are_installed() -> None:
    fabric, a, b = pair()
    _receives(b, 4)
    fabric.run()
    add_rule(a.c, action="delay", op="RDMA_WRITE", delay_ms=1)
    _burst(fabric, a, 3)
    assert _sent(fabric, FrameType.SENDS) == []
    assert [f[0] for f in _sent(fabric, FrameType.SEND)] == [1, 2, 3, 4]
    assert b.log() == [(DTO, 100 + i, OK, 16) for i in range(4)]
