"""The RC service: RDMA Write, Read and Send/Receive land exact bytes; one cumulative ACK per
batch; a Send that finds no receive holds everything behind it; completions leave in posting
order; a remote access error completes the failing DTO, then BROKEN, then FLUSHED for the rest,
each exactly once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from proto.constants import CompletionFlags, Dtos, MemPriv, MemType
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, pair
from tests.core.harness import Fabric

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
PATTERN = bytes((7 * i + 3) & 0xFF for i in range(4096))


def test_rdma_write_lands_exactly_its_bytes() -> None:
    fabric, a, b = pair()
    b.memory()[:] = b"\xee" * 4096
    a.memory(0, 300)[:] = PATTERN[:300]
    # gather: two local segments make one write
    a.c.post(
        Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 100), a.triplet(200, 100)], 11, b.rmr(1000, 200), 0
    )
    fabric.run()
    [done] = a.events()
    assert (done.ep, done.cookie, done.status, done.transfered_length, done.operation) == (
        a.ep,
        11,
        OK,
        200,
        Dtos.RDMA_WRITE,
    )
    assert bytes(b.memory(1000, 200)) == PATTERN[:100] + PATTERN[200:300]
    assert bytes(b.memory(999, 1)) == bytes(b.memory(1200, 1)) == b"\xee"
    assert b.log() == [], "a one-sided write tells the target nothing"
    assert list(fabric.frames(FrameType.WRITE)) == [
        ("n1", "n2", [1, b.address + 1000, b.lmr.rmr_context])
    ]


def test_rdma_read_lands_exactly_its_bytes() -> None:
    fabric, a, b = pair()
    b.memory()[:] = PATTERN
    a.memory()[:] = b"\xee" * 4096
    # scatter: the read fills the front segment first
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 50), a.triplet(100, 150)], 12, b.rmr(500, 200), 0)
    fabric.run()
    [done] = a.events()
    assert (done.cookie, done.status, done.transfered_length, done.operation) == (
        12,
        OK,
        200,
        Dtos.RDMA_READ,
    )
    assert bytes(a.memory(0, 50)) == PATTERN[500:550]
    assert bytes(a.memory(100, 150)) == PATTERN[550:700]
    assert bytes(a.memory(50, 50)) == b"\xee" * 50 and bytes(a.memory(250, 1)) == b"\xee"
    assert b.log() == []
    assert list(fabric.frames(FrameType.READ_RESP)) == [("n2", "n1", [1])]
    assert list(fabric.frames(FrameType.ACK)) == [], "the response acknowledges the Read"


def test_a_reads_response_acknowledges_the_writes_before_it() -> None:
    """RC executes in order, so the response to a Read says every earlier request executed:
    the Write before it completes with it, though the Write's own ACK was lost."""
    fabric, a, b = pair()
    add_rule(b.c, action="blackhole", op="ACK", count=1)
    a.memory(0, 16)[:] = PATTERN[:16]
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], 1, b.rmr(0, 16), 0)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(64, 16)], 2, b.rmr(0, 16), 0)
    fabric.run()
    assert [f for _, _, f in fabric.frames(FrameType.ACK)] == [], "the Write's ACK was lost"
    assert a.log() == [(DTO, 1, OK, 16), (DTO, 2, OK, 16)]
    assert bytes(a.memory(64, 16)) == PATTERN[:16], "the Read saw the Write"


def test_send_lands_in_the_receive_and_each_side_gets_its_cookie() -> None:
    fabric, a, b = pair()
    a.memory(0, 300)[:] = PATTERN[:300]
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(1000, 150)], 0xB1, None, 0)
    # scatter: the second receive lands in two segments, front one filled first
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(2000, 120), b.triplet(3000, 200)], 0xB2, None, 0)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 100)], 0xA1, None, 0)
    # gather: two segments of the sender make one message
    a.c.post(Dtos.SEND, a.ep, [a.triplet(100, 50), a.triplet(200, 100)], 0xA2, None, 0)
    fabric.run()
    sent, got = a.events(), b.events()
    assert [(e.ep, e.cookie, e.status, e.transfered_length, e.operation) for e in sent] == [
        (a.ep, 0xA1, OK, 100, Dtos.SEND),
        (a.ep, 0xA2, OK, 150, Dtos.SEND),
    ]
    assert [(e.ep, e.cookie, e.status, e.transfered_length, e.operation) for e in got] == [
        (b.ep, 0xB1, OK, 100, Dtos.RECEIVE),
        (b.ep, 0xB2, OK, 150, Dtos.RECEIVE),
    ]
    assert bytes(b.memory(1000, 100)) == PATTERN[:100]
    assert bytes(b.memory(1100, 50)) == bytes(50), "past the message: untouched"
    message = PATTERN[100:150] + PATTERN[200:300]
    assert bytes(b.memory(2000, 120)) == message[:120]
    assert bytes(b.memory(3000, 30)) == message[120:]
    assert bytes(b.memory(3030, 170)) == bytes(170)


def test_a_send_larger_than_the_receive_is_a_length_error_on_both_sides() -> None:
    fabric, a, b = pair()
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 8)], 1, None, 0)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(8, 8)], 2, None, 0)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 9)], 3, None, 0)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 1)], 4, None, 0)
    fabric.run()
    assert b.log() == [
        (DTO, 1, St.DTO_ERR_LOCAL_LENGTH, 0),
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 2, St.DTO_ERR_FLUSHED, 0),
    ]
    assert a.log() == [
        (DTO, 3, St.DTO_ERR_REMOTE_RESPONDER, 0),
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 4, St.DTO_ERR_FLUSHED, 0),
    ]
    assert bytes(b.memory(0, 16)) == bytes(16)


def test_one_cumulative_ack_answers_a_batch() -> None:
    fabric, a, b = pair()
    for i in range(3):
        a.memory(16 * i, 16)[:] = bytes([i + 1]) * 16
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(16 * i, 16)], i, b.rmr(16 * i, 16), 0)
    fabric.run()
    # the first rang the doorbell and left at once; the two posted behind it rang none (the
    # daemon polls the EP until the end of its turn) and left together: one ACK for both
    assert list(fabric.frames(FrameType.ACK)) == [("n2", "n1", [1]), ("n2", "n1", [3])]
    assert a.log() == [(DTO, i, OK, 16) for i in range(3)]
    # one write per batch: one ACK each
    for i in range(3, 5):
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], i, b.rmr(0, 16), 0)
        fabric.run()
    assert [f for _, _, f in fabric.frames(FrameType.ACK)] == [[1], [3], [4], [5]]
    assert a.log() == [(DTO, 3, OK, 16), (DTO, 4, OK, 16)]


def test_a_send_before_its_receive_holds_everything_behind_it_in_order() -> None:
    """RC order: a write posted after a stalled send lands only after that send is received."""
    fabric, a, b = pair()
    for i in range(6):
        a.memory(i * 100, 100)[:] = bytes([i + 1]) * 100
    for i in range(3):
        a.c.post(Dtos.SEND, a.ep, [a.triplet(i * 100, 100)], i, None, 0)
        # each write overwrites the same spot: the last one to execute wins
        a.c.post(
            Dtos.RDMA_WRITE, a.ep, [a.triplet(300 + i * 100, 100)], 10 + i, b.rmr(3000, 100), 0
        )
    fabric.run()
    assert bytes(b.memory(3000, 100)) == bytes(100), "a write overtook a stalled send"
    assert a.log() == [] and b.log() == []
    assert list(fabric.frames(FrameType.ACK)) == []
    for i in range(3):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(1000 * i, 200)], 20 + i, None, 0)
        fabric.run()
        assert b.log() == [(DTO, 20 + i, OK, 100)]
        assert bytes(b.memory(1000 * i, 100)) == bytes([i + 1]) * 100
        # the write right behind this send has run, the next ones not yet
        assert bytes(b.memory(3000, 100)) == bytes([4 + i]) * 100
        assert a.log() == [(DTO, i, OK, 100), (DTO, 10 + i, OK, 100)]


def test_a_payload_still_arriving_when_the_stall_clears_runs_once_it_has_landed() -> None:
    """A Send read while the stream is stalled has its payload held; if a receive clears the
    stall before that payload has fully arrived, the Send still runs when it has."""
    fabric, a, b = pair()
    a.memory(0, 1000)[:] = PATTERN[:1000]
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 10)], 1, None, 0)  # no receive yet: stalls
    fabric.run()
    pipe = fabric.pipe(a.c.node, b.c.node)
    deliver, held = pipe.deliver, bytearray()
    pipe.deliver = held.extend
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 1000)], 2, None, 0)
    fabric.run()
    deliver(bytes(held[:-500]))  # the header and half the payload
    for i in range(2):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(1000 * (i + 1), 1000)], 20 + i, None, 0)
    fabric.run()
    assert b.log() == [(DTO, 20, OK, 10)]
    deliver(bytes(held[-500:]))
    pipe.deliver = deliver
    fabric.run()
    assert b.log() == [(DTO, 21, OK, 1000)]
    assert bytes(b.memory(2000, 1000)) == PATTERN[:1000]
    assert a.log() == [(DTO, 1, OK, 10), (DTO, 2, OK, 1000)]


def test_suppress_hides_a_success_and_unsignalled_wakes_nobody() -> None:
    fabric, a, b = pair()
    a.memory(0, 8)[:] = b"early!!!"
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 8)], 1, None, CompletionFlags.SUPPRESS)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 4)], 2, None, 0)
    fabric.run()
    assert b.log() == []
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 3, None, 0)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(64, 64)], 4, None, 0)
    fabric.run()
    assert b.log() == [(DTO, 3, OK, 8), (DTO, 4, OK, 4)]
    assert bytes(b.memory(0, 8)) == b"early!!!"
    assert a.log() == [(DTO, 2, OK, 4)], "the suppressed send completed silently"
    assert a.c.core.eps[a.ep].requests == 0, "yet it freed its queue slot"


def test_completions_leave_in_posting_order() -> None:
    """A bind is done as soon as it executes, yet completes only after the write before it;
    a read, a send and writes interleave in the order posted."""
    fabric, a, b = pair()
    rmr = a.c.call(a.c.core.rmr_create(a.pz))
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 100, None, 0)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0)
    a.c.call(
        a.c.core.rmr_bind(rmr, a.lmr.handle, a.triplet(0, 64), MemPriv.REMOTE_READ, a.ep, 2, 0),
        run=False,
    )
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(64, 8)], 3, b.rmr(64, 8), 0)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 8)], 4, None, 0)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 5, b.rmr(128, 8), 0)
    assert a.log() == [], "the bind executed, but waits for the write before it"
    fabric.run()
    assert a.log() == [
        (DTO, 1, OK, 8),
        (E.RMR_BIND_COMPLETION_EVENT, 2, OK),
        (DTO, 3, OK, 8),
        (DTO, 4, OK, 8),
        (DTO, 5, OK, 8),
    ]
    assert b.log() == [(DTO, 100, OK, 8)]


# -- remote access errors --------------------------------------------------------------------


def _bad_key(fabric: Fabric, b: Side) -> list[int]:
    return [b.address, 16, b.lmr.rmr_context ^ 0x5A5A]


def _out_of_range(fabric: Fabric, b: Side) -> list[int]:
    return [b.address + b.size - 8, 16, b.lmr.rmr_context]


def _lmr(b: Side, privileges: MemPriv, pz: int | None = None) -> list[int]:
    """A second LMR of b's memory (another PZ, or fewer privileges); its RMR triplet."""
    core = b.c.core
    zone = pz if pz is not None else b.pz
    info = b.c.call(
        core.lmr_create(MemType.VIRTUAL, b.address, b.size, zone, privileges, b.c.locate)
    )
    return [b.address, 16, info.rmr_context]


def _wrong_privilege_for(op: Dtos) -> Callable[[Fabric, Side], list[int]]:
    def make(fabric: Fabric, b: Side) -> list[int]:
        other = MemPriv.REMOTE_READ if op == Dtos.RDMA_WRITE else MemPriv.REMOTE_WRITE
        return _lmr(b, MemPriv.LOCAL_READ | MemPriv.LOCAL_WRITE | other)

    return make


def _wrong_pz(fabric: Fabric, b: Side) -> list[int]:
    return _lmr(b, MemPriv.ALL, b.c.call(b.c.core.pz_create()))


def _revoked(fabric: Fabric, b: Side) -> list[int]:
    triplet = _lmr(b, MemPriv.ALL)
    b.c.admin("rmr_revoke", [triplet[2]])
    return triplet


CASES: dict[str, Callable[[Fabric, Side, Dtos], list[int]]] = {
    "bad rmr_context": lambda f, b, op: _bad_key(f, b),
    "out of range": lambda f, b, op: _out_of_range(f, b),
    "wrong privilege": lambda f, b, op: _wrong_privilege_for(op)(f, b),
    "wrong PZ": lambda f, b, op: _wrong_pz(f, b),
    "revoked": lambda f, b, op: _revoked(f, b),
}


@pytest.mark.parametrize("op", [Dtos.RDMA_WRITE, Dtos.RDMA_READ], ids=lambda d: d.name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_remote_access_error_then_broken_then_flushed_each_once(case: str, op: Dtos) -> None:
    fabric, a, b = pair()
    b.memory()[:] = b"\xbb" * 4096
    a.memory()[:] = b"\xaa" * 4096
    bad = CASES[case](fabric, b, op)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], 1, b.rmr(2048, 16), 0)
    a.c.post(op, a.ep, [a.triplet(1024, 16)], 2, bad, 0)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], 3, b.rmr(3072, 16), 0)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(1536, 16)], 4, b.rmr(0, 16), 0)
    a.c.post(Dtos.RECEIVE, a.ep, [a.triplet(512, 16)], 5, None, 0)
    fabric.run()
    fabric.advance(10.0)
    assert a.log() == [
        (DTO, 1, OK, 16),
        (DTO, 2, St.DTO_ERR_REMOTE_ACCESS, 0),
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 3, St.DTO_ERR_FLUSHED, 0),
        (DTO, 4, St.DTO_ERR_FLUSHED, 0),
        (DTO, 5, St.DTO_ERR_FLUSHED, 0),
    ]
    assert b.log() == [(E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(b.memory(2048, 16)) == b"\xaa" * 16
    assert bytes(b.memory(3072, 16)) == b"\xbb" * 16, "nothing after the error executed"
    assert bytes(b.memory(0, 2048)) == b"\xbb" * 2048
    assert bytes(a.memory(1024, 16)) == bytes(a.memory(1536, 16)) == b"\xaa" * 16
    [(_, _, nak)] = fabric.frames(FrameType.NAK)
    assert nak == [2, St.DTO_ERR_REMOTE_ACCESS]
    assert a.c.core.eps[a.ep].requests == 0 and a.c.core.eps[a.ep].recvs == 0
