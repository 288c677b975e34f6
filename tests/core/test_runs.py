"""Runs of plain requests (fabricd.nic.runs): the Writes and Sends of one turn's plain WQEs are
one Run in the initiator from post to completion, and every RC rule still holds per request: an
ACK inside a run completes its head, a NAK or a broken link inside one completes each request
once and in order, a fault rule sees single frames, and fenced or large requests are Ops."""

from __future__ import annotations

from typing import Any

import pytest

from fabricd.nic import initiator, runs
from fabricd.nic.objects import Ep, Op
from fabricd.nic.runs import Run, expand, find
from proto.attrs import EpAttr
from proto.batch import MAX_OP_BYTES, MAX_OPS
from proto.constants import CompletionFlags, Dtos
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.frames import FrameType
from tests.core.flows import Brief, Side, add_rule, connect, side
from tests.core.harness import Fabric, Pipe, inject

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
DEPTH = MAX_OPS + 16


def _setup() -> tuple[Fabric, Side, Side]:
    """Two connected sides, a's EP holding more requests than a batch; b's memory 16 KiB."""
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    a = side(fabric, n1, attr=EpAttr(max_request_dtos=DEPTH), qlen=2 * DEPTH, size=64 * 1024)
    b = side(fabric, n2, size=64 * 1024)
    connect(fabric, a, b)
    return fabric, a, b


def _ep(s: Side) -> Ep:
    """The daemon's EP of a side."""
    assert s.c.state is not None
    return s.c.node.nic.consumers[s.c.state.id].eps[s.ep]


def _write(a: Side, b: Side, cookie: int, n: int = 16, flags: int = 0) -> None:
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, n)], cookie, b.rmr(0, n), flags)


def _items(ep: Ep) -> list[tuple[str, int, int]]:
    """The EP's outstanding requests as (Run or Op, first seq, last seq)."""
    return [
        ("Run", item.first, item.last) if isinstance(item, Run) else ("Op", item.seq, item.seq)
        for item in ep.ops
    ]


def _hold(fabric: Fabric, a: Side, b: Side) -> Pipe:
    """One Write sent and acknowledged, then a's requests held on their way to b. (The first
    Write posted in a turn rings the doorbell and is taken alone; the daemon takes the rest of
    the turn's together.)"""
    _write(a, b, 0)
    fabric.run()
    pipe = fabric.pipe(a.c.node, b.c.node)
    pipe.held = True
    return pipe


def _held_writes(last: int) -> tuple[Fabric, Side, Side, Pipe]:
    """Two sides, a's Writes of cookies 1..``last`` posted in one turn and held on their way
    to b (after the one ``_hold`` sends), and the pipe that holds them."""
    fabric, a, b = _setup()
    requests = _hold(fabric, a, b)
    for cookie in range(1, last + 1):
        _write(a, b, cookie)
    fabric.run()
    return fabric, a, b, requests


def _completions(s: Side) -> list[Brief]:
    """The DTO completions queued on a side's EVD, taken off it (connection events left out)."""
    return [event for event in s.log() if event[0] == DTO]


def _broken_at(cookie: int, status: St, last: int) -> list[Brief]:
    """Completions of 16-byte Writes 0..``last`` when the one of ``cookie`` failed with
    ``status``: those before it successful, it with its error, the rest flushed; each once, in
    posting order."""
    return [
        *[(DTO, c, OK, 16) for c in range(cookie)],
        (DTO, cookie, status, 0),
        *[(DTO, c, St.DTO_ERR_FLUSHED, 0) for c in range(cookie + 1, last + 1)],
    ]


def test_a_turn_of_plain_writes_is_one_run_completed_in_order() -> None:
    fabric, a, _, requests = _held_writes(40)
    assert _items(_ep(a)) == [("Run", 2, 2), ("Run", 3, 41)]
    requests.release()
    fabric.run()
    assert not _ep(a).ops, "all completed: nothing outstanding"
    assert a.log() == [(DTO, c, OK, 16) for c in range(41)]


@pytest.mark.interpreted
def test_a_post_with_nothing_outstanding_goes_at_once_and_the_next_ones_batch_behind_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """runs.lone: a plain Write posted while none is outstanding is a Run of one already on
    the wire (never held, never through runs.queue) in a WRITE frame of its own; Writes posted
    while it waits for its ACK are queued behind it as usual (the first alone: it rang the
    doorbell; the rest as one WRITES frame), and all complete once, in order."""
    queued: list[int] = []

    def counted(ep: Ep, wqes: list[Any], *rest: Any) -> None:
        queued.append(len(wqes))
        runs.queue(ep, wqes, *rest)

    monkeypatch.setattr(initiator, "queue", counted)
    fabric, a, b = _setup()
    pipe = fabric.pipe(a.c.node, b.c.node)
    pipe.held = True
    _write(a, b, 0)
    fabric.run()
    ep = _ep(a)
    assert _items(ep) == [("Run", 1, 1)] and not ep.held
    assert queued == [], "the lone Write went on the wire from post_plain"
    for cookie in (1, 2, 3):
        _write(a, b, cookie)
    fabric.run()
    assert _items(ep) == [("Run", 1, 1), ("Run", 2, 2), ("Run", 3, 4)] and not ep.held
    assert queued == [1, 2]
    pipe.release()
    fabric.run()
    assert [fields[0] for _, _, fields in fabric.frames(FrameType.WRITE)] == [1, 2]
    assert [fields[0] for _, _, fields in fabric.frames(FrameType.WRITES)] == [3]
    assert a.log() == [(DTO, c, OK, 16) for c in range(4)]
    assert not ep.ops


def test_fenced_and_large_requests_are_ops_between_runs() -> None:
    fabric, a, b = _setup()
    requests = _hold(fabric, a, b)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 99, None, 0)
    _write(a, b, 1)
    _write(a, b, 2)
    _write(a, b, 3, flags=int(CompletionFlags.BARRIER_FENCE))
    _write(a, b, 4, n=MAX_OP_BYTES + 1)
    _write(a, b, 5)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 16)], 6, None, 0)
    fabric.run()
    assert _items(_ep(a)) == [
        ("Run", 2, 2),
        ("Run", 3, 3),
        ("Op", 4, 4),
        ("Op", 5, 5),
        ("Run", 6, 6),
        ("Run", 7, 7),
    ]
    requests.release()
    fabric.run()
    assert a.log() == [(DTO, c, OK, MAX_OP_BYTES + 1 if c == 4 else 16) for c in range(7)]


def test_runs_of_two_kinds_completed_together_keep_their_kinds_in_order() -> None:
    """One ACK retires a Run of Writes, a Run of Sends and another of Writes: their
    completions (written a kind at a time) come in posting order, each with its own DTO."""
    fabric, a, b = _setup()
    requests = _hold(fabric, a, b)
    for cookie in range(4):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(64 * cookie, 64)], 100 + cookie, None, 0)
    kinds = [Dtos.RDMA_WRITE] * 3 + [Dtos.SEND] * 4 + [Dtos.RDMA_WRITE] * 2
    for cookie, kind in enumerate(kinds, 1):
        if kind == Dtos.SEND:
            a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 16)], cookie, None, 0)
        else:
            _write(a, b, cookie)
        if cookie in (3, 7):
            fabric.run()  # a turn of one kind: a Run each
    items = _items(_ep(a))
    assert len(items) >= 3 and {kind for kind, *_ in items} == {"Run"}, items
    requests.release()
    fabric.run()
    done = [(e.cookie, e.operation, e.status) for e in a.events() if e.event_number == DTO]
    assert done == [(cookie, kind, OK) for cookie, kind in enumerate([Dtos.RDMA_WRITE, *kinds])]


def test_a_run_longer_than_a_batch_goes_in_two_and_its_acks_complete_its_head() -> None:
    fabric, a, b, requests = _held_writes(MAX_OPS + 11)
    writes = fabric.frames(FrameType.WRITES)
    assert [fields[0] for _, _, fields in writes] == [3], "a batch; the rest wait for its ACK"
    inject(fabric.pipe(b.c.node, a.c.node), FrameType.ACK, 6)  # as if 2..6 executed
    fabric.run()
    [run] = _ep(a).ops
    assert isinstance(run, Run) and (run.first, run.done, run.sent) == (3, 4, MAX_OPS)
    assert a.log() == [(DTO, c, OK, 16) for c in range(6)]
    requests.release()
    fabric.run()
    writes = fabric.frames(FrameType.WRITES)
    assert [fields[0] for _, _, fields in writes] == [3, MAX_OPS + 3]
    assert a.log() == [(DTO, c, OK, 16) for c in range(6, MAX_OPS + 12)]


def test_a_nak_inside_a_run_completes_each_request_once_in_order() -> None:
    fabric, a, b, _ = _held_writes(20)
    # the target refused the Write of sequence number 9 (cookie 8): 2..8 executed
    inject(fabric.pipe(b.c.node, a.c.node), FrameType.NAK, 9, St.DTO_ERR_REMOTE_ACCESS)
    fabric.run()
    assert _completions(a) == _broken_at(8, St.DTO_ERR_REMOTE_ACCESS, 20)


def test_a_peer_crash_inside_a_run_flushes_each_request_once_in_order() -> None:
    fabric, a, b, _ = _held_writes(30)
    inject(fabric.pipe(b.c.node, a.c.node), FrameType.ACK, 11)
    fabric.run()
    b.c.node.crash()
    fabric.run()
    assert _completions(a) == _broken_at(11, St.DTO_ERR_TRANSPORT, 30)


def test_a_fault_rule_sends_a_held_run_as_single_frames() -> None:
    fabric, a, b = _setup()
    requests = _hold(fabric, a, b)
    add_rule(a.c, action="delay", op="SEND", delay_ms=1)  # installed: no batching
    for cookie in (1, 2, 3, 4):
        _write(a, b, cookie)
    fabric.run()
    requests.release()
    fabric.run()
    assert [fields[0] for _, _, fields in fabric.frames(FrameType.WRITE)] == [1, 2, 3, 4, 5]
    assert list(fabric.frames(FrameType.WRITES)) == []
    assert a.log() == [(DTO, c, OK, 16) for c in range(5)]


def test_expand_and_find_keep_each_request_and_what_is_still_held() -> None:
    """A Run partly completed and partly sent becomes the Ops of what is outstanding; the held
    queue gets the same Op objects for what was not sent."""
    _, a, _, _ = _held_writes(10)
    ep = _ep(a)
    [_alone, run] = ep.ops
    assert isinstance(run, Run) and (run.first, run.last, run.sent) == (3, 11, 9)
    run.done, run.sent = 3, 7  # as if 3..5 completed and 3..9 went on the wire
    ep.held.append(run)
    op = find(ep, 7)  # inside the run: the EP's runs become Ops
    assert isinstance(op, Op) and (op.seq, op.cookie, op.kind) == (7, 6, Dtos.RDMA_WRITE)
    ops = expand(ep)
    assert [(o.seq, o.cookie, o.length, o.done) for o in ops] == [
        (seq, seq - 1, 16, False) for seq in (2, *range(6, 12))
    ]
    assert list(ep.held) == list(ops)[-2:], "the held ones are the same Ops"
    assert find(ep, 4) is None, "completed: not outstanding"
    assert find(ep, 12) is None


def test_a_take_across_the_ring_end_is_one_run() -> None:
    """A turn's WQEs that wrap around the send queue's end are taken as two stretches (one
    to the end, one from slot 0): the second joins the first's Run, still held, so both are
    one Run to send, complete and retire, in order."""
    fabric, a, b = _setup()
    q = _ep(a).queues
    assert q is not None
    done = q.sq.entries - 3  # the next post's slot: three before the end
    completed = []
    for cookie in range(done):
        _write(a, b, cookie)
        fabric.run()
        completed += a.log()  # taken as they come: the EVD holds fewer than the ring
    assert completed == [(DTO, c, OK, 16) for c in range(done)]
    requests = fabric.pipe(a.c.node, b.c.node)
    requests.held = True
    for cookie in range(done, done + 5):  # the first rings the doorbell and goes alone
        _write(a, b, cookie)
    fabric.run()
    first = done + 1  # sequence numbers start at 1
    assert _items(_ep(a)) == [("Run", first, first), ("Run", first + 1, first + 4)]
    assert [fields[0] for _, _, fields in fabric.frames(FrameType.WRITES)][-1:] == [first + 1]
    requests.release()
    fabric.run()
    assert a.log() == [(DTO, c, OK, 16) for c in range(done, done + 5)]
