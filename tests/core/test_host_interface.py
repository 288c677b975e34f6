"""The host interface's work queues, driven by the real client core against the real NIC:
doorbells are rung only when none is in flight, a kick makes good a lost one, a call never
overtakes a post, the daemon publishes state and completions; and a consumer that writes
garbage into its own queues loses its IA, never the daemon or another consumer's memory."""

from __future__ import annotations

import pytest

from fabricd.nic import intake
from fabricd.nic.objects import Ep
from fabricd.nic.queues import doorbell as heard
from proto.codec import encode
from proto.constants import CloseFlags, CompletionFlags, Dtos, EpState
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.frames import FrameType
from proto.hostif import (
    PRODUCER_LINE,
    SEGMENT,
    STAGE_BYTES,
    STAGED,
    U32,
    WQE,
    Opcode,
    Ring,
    Word,
    set_u32,
    write_wqe,
)
from proto.workq import STAGE_OFFSET, wq_segment
from tests.core.flows import Side, pair

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
FENCE = int(CompletionFlags.BARRIER_FENCE)


def _rings(s: Side) -> tuple[Ring, Ring]:
    return s.c.core.queues(s.c.core.eps[s.ep])


def _doorbell(ep: int) -> bytes:
    return encode(FrameType.DOORBELL, ep)


def _write(a: Side, b: Side, cookie: int, at: int = 0) -> bytes:
    """Post a 64-byte write; returns the doorbell the core asked for (not sent)."""
    return a.c.core.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(at, 64)], cookie, b.rmr(at, 64), 0)


def test_a_burst_of_posts_rings_one_doorbell() -> None:
    fabric, a, b = pair()
    a.memory(0, 256)[:] = bytes(range(256))
    doorbells = [_write(a, b, cookie, at=64 * cookie) for cookie in range(4)]
    assert doorbells[0] == b"".join(doorbells)
    assert a.log() == [], "nothing runs before the doorbell"
    a.c.send(doorbells[0])
    fabric.run()
    assert a.log() == [(DTO, cookie, OK, 64) for cookie in range(4)]
    assert bytes(b.memory(0, 256)) == bytes(range(256))
    assert _write(a, b, 9), "the doorbell was heard: the next post rings again"


def test_a_doorbell_skipped_in_a_race_is_made_good_by_one_kick() -> None:
    """The race: the driver saw HEARD one behind and skipped the doorbell, while the daemon's
    drain had already passed. Before the driver waits, a kick brings the WQE in."""
    fabric, a, b = pair()
    a.c.send(_write(a, b, 1))
    fabric.run()
    sq, _ = _rings(a)
    local, remote = (a.address, 64, a.lmr.lmr_context), (b.address, 64, b.lmr.rmr_context)
    write_wqe(sq, Opcode.RDMA_WRITE, 0, 2, [local], remote)
    sq.publish()  # ... and no doorbell: the driver thought one was in flight
    kick = a.c.core.kick()
    assert kick and a.c.core.kick() == b"", "one kick per new WQE"
    a.c.send(kick)
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 64), (DTO, 2, OK, 64)]
    assert a.c.core.kick() == b"", "nothing is pending"


def test_a_doorbell_in_flight_is_not_kicked_again() -> None:
    fabric, a, b = pair()
    doorbell = _write(a, b, 1)
    assert a.c.core.kick() == b"", "the daemon has not taken the doorbell yet: it is coming"
    a.c.send(doorbell)
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 64)]


def _polled(s: Side, peer: Side) -> Ring:
    """Post a write and let the daemon take its doorbell, not yet its end-of-turn look: it
    polls the EP (POLL 1). Returns the SQ."""
    sq, _ = _rings(s)
    s.c.send(_write(s, peer, 1))
    assert sq.word(Word.POLL) == 1
    return sq


@pytest.mark.interpreted
def test_a_doorbell_is_counted_heard_once_what_it_announced_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HEARD moves after the WQEs before the doorbell are taken: a driver that sees the doorbell
    heard never finds its posts untaken (and kicks for nothing, as a polling program would on
    every empty dequeue in between)."""
    fabric, a, b = pair()
    sq, _ = _rings(a)
    seen: list[int] = []

    def counting(ep: Ep) -> None:
        seen.append(sq.space())
        heard(ep)

    monkeypatch.setattr(intake, "doorbell", counting)
    doorbell = _write(a, b, 1)
    doorbell += b"".join(_write(a, b, cookie, at=64 * cookie) for cookie in (2, 3))
    a.c.send(doorbell)
    assert seen == [sq.entries], "all three taken before HEARD"
    assert a.c.core.kick() == b""
    fabric.run()
    assert a.log() == [(DTO, cookie, OK, 64) for cookie in (1, 2, 3)]


def test_no_kick_while_the_daemon_polls_the_ep() -> None:
    """A post while POLL is 1 rings nothing, and the kick before a wait adds nothing either:
    the daemon looks again by itself."""
    fabric, a, b = pair()
    _polled(a, b)
    assert _write(a, b, 2) == b""
    assert a.c.core.kick() == b"", "the daemon polls: no doorbell needed"
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 64), (DTO, 2, OK, 64)]


def test_a_call_never_overtakes_a_post() -> None:
    """A post while the daemon polls the EP rings no doorbell; a call right behind it still
    finds the WQE taken first."""
    fabric, a, b = pair()
    sq = _polled(a, b)
    assert _write(a, b, 2) == b"", "POLL 1: no doorbell"
    assert sq.space() == sq.entries - 1
    # graceful: it waits for what was posted before it, so the write must have been taken first
    a.c.call(a.c.core.ep_disconnect(a.ep, CloseFlags.GRACEFUL), run=False)
    assert sq.space() == sq.entries, "taken before the call ran"
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 64), (DTO, 2, OK, 64), (E.CONNECTION_EVENT_DISCONNECTED, b"")]


def test_an_ep_that_stops_being_polled_without_a_look_is_drained_by_the_next_call() -> None:
    """The EP left CONNECTED (POLL 0, stored with no look after it) just as the driver, having
    seen CONNECTED and POLL 1, published a WQE and rang nothing: the next call takes it."""
    fabric, a, b = pair()
    sq = _polled(a, b)
    nic, consumer = a.c.node.nic, a.c.state
    assert consumer is not None and a.ep in consumer.polled
    nic.eps.broken(consumer.eps[a.ep])
    assert sq.word(Word.POLL) == 0
    local, remote = (a.address, 64, a.lmr.lmr_context), (b.address, 64, b.lmr.rmr_context)
    write_wqe(sq, Opcode.RDMA_WRITE, 0, 2, [local], remote)
    sq.publish()
    a.c.call(a.c.core.pz_create(), run=False)
    assert sq.space() == sq.entries, "the call took it first"
    fabric.run()
    assert (DTO, 2, St.DTO_ERR_FLUSHED, 0) in a.log()
    a.c.call(a.c.core.pz_create())
    assert a.ep not in consumer.polled, "an empty look after POLL 0 ends its place"


def _drains_for_one_call(idle: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many EPs the daemon looks at before one call of an IA with ``idle`` idle EPs
    besides one it polls."""
    _, a, b = pair()
    for _ in range(idle):
        a.c.call(a.c.core.ep_create(a.pz, a.evd, a.evd, a.evd, None))
    _polled(a, b)
    nic, looked = a.c.node.nic, list[int]()
    drain = nic.intake.drain

    def counted(ep: Ep) -> None:
        looked.append(ep.handle)
        drain(ep)

    monkeypatch.setattr(nic.intake, "drain", counted)
    a.c.call(a.c.core.pz_create(), run=False)
    monkeypatch.undo()
    return len(looked)


@pytest.mark.interpreted
def test_a_call_looks_at_the_eps_the_daemon_polls_not_the_idle_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every other EP's posts rang a doorbell (or rode one in flight) that came before the
    call: a call costs nothing per idle EP (dtestcm -c 1000 opens 1000 in one IA)."""
    assert _drains_for_one_call(0, monkeypatch) == 1
    assert _drains_for_one_call(64, monkeypatch) == 1


def test_the_daemon_publishes_state_completions_and_doorbells() -> None:
    fabric, a, b = pair()
    sq, rq = _rings(a)
    assert EpState(sq.word(Word.STATE)) == EpState.CONNECTED
    a.c.send(_write(a, b, 1))
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 5, None, 0)
    fabric.run()
    assert (sq.word(Word.DONE), sq.word(Word.HEARD), rq.word(Word.DONE)) == (1, 1, 0)
    assert a.c.core.eps[a.ep].requests == 0 and b.c.core.eps[b.ep].recvs == 1
    a.c.call(a.c.core.ep_disconnect(a.ep, 0))
    assert EpState(sq.word(Word.STATE)) == EpState.DISCONNECTED


def _poison_index(s: Side, value: int) -> None:
    sq, _ = _rings(s)
    set_u32(sq.view, PRODUCER_LINE, value)


def _poison_entry(
    s: Side, opcode: int, wqe_flags: int = 0, flags: int = 0, stage: int = 0, length: int = 0
) -> None:
    sq, _ = _rings(s)
    at = sq.slot(sq.mine)
    WQE.pack_into(sq.view, at, opcode, wqe_flags, 1, flags, 1, 0, 0, 0, stage, 0, 0)
    SEGMENT.pack_into(sq.view, at + WQE.size, s.address, length, s.lmr.lmr_context)
    sq.publish()


GARBAGE = {
    "an index past the ring": lambda s: _poison_index(s, _rings(s)[0].entries + 1),
    "an index running backwards": lambda s: _poison_index(s, U32 - 1),
    "opcode zero": lambda s: _poison_entry(s, 0),
    "an unknown opcode": lambda s: _poison_entry(s, 77),
    "a receive on the send queue": lambda s: _poison_entry(s, Opcode.RECEIVE),
    "an unknown WQE flag": lambda s: _poison_entry(s, Opcode.SEND, wqe_flags=2),
    "a stage offset without STAGED": lambda s: _poison_entry(s, Opcode.SEND, stage=64),
    "a staged RDMA Read": lambda s: _poison_entry(s, Opcode.RDMA_READ, STAGED),
    "a staged fenced Write": lambda s: _poison_entry(s, Opcode.RDMA_WRITE, STAGED, FENCE),
    "staged bytes past the staging area": lambda s: _poison_entry(
        s, Opcode.SEND, STAGED, stage=STAGE_BYTES - 32, length=64
    ),
}


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_in_a_queue_closes_that_ia_and_its_peer_sees_the_break(garbage: str) -> None:
    fabric, a, b = pair()
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 7, None, 0)
    GARBAGE[garbage](a)
    a.c.send(_doorbell(a.ep))
    fabric.run()
    assert a.c.closed_for and a.c.core.catastrophic, "the IA was closed with a reason"
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 7, St.DTO_ERR_FLUSHED, 0)]
    assert a.c.state is not None and a.c.state.id not in a.c.node.nic.consumers
    other = a.c.fabric.add_consumer(a.c.node)  # the daemon serves on
    assert type(other.call(other.core.pz_create())) is int


def test_a_segment_outside_the_consumers_lmrs_is_a_local_protection_error() -> None:
    fabric, a, b = pair()
    sq, _ = _rings(a)
    alien = (b.address, 64, b.lmr.lmr_context)  # another consumer's memory and context
    write_wqe(sq, Opcode.RDMA_WRITE, 0, 3, [alien], (b.address, 64, b.lmr.rmr_context))
    sq.publish()
    b.memory(0, 64)[:] = b"b" * 64
    a.c.send(a.c.core.kick())
    fabric.run()
    assert a.log() == [(DTO, 3, St.DTO_ERR_LOCAL_PROTECTION, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(b.memory(0, 64)) == b"b" * 64


def test_a_staged_write_sends_the_bytes_staged_at_its_post() -> None:
    """STAGED: the driver copied the source into the staging area when it posted; the daemon
    sends those bytes (the program may not touch the buffer before the completion anyway)."""
    fabric, a, b = pair()
    sq, _ = _rings(a)
    segment = a.c.core.mapper.map(wq_segment(a.c.core.name, a.ep))  # the driver's mapping
    a.memory(0, 64)[:] = b"m" * 64
    segment[STAGE_OFFSET + 4096 : STAGE_OFFSET + 4096 + 64] = b"s" * 64
    local, remote = (a.address, 64, a.lmr.lmr_context), (b.address, 64, b.lmr.rmr_context)
    write_wqe(sq, Opcode.RDMA_WRITE, 0, 5, [local], remote, stage=4096)
    sq.publish()
    a.c.send(_doorbell(a.ep))
    fabric.run()
    assert a.log() == [(DTO, 5, OK, 64)]
    assert bytes(b.memory(0, 64)) == b"s" * 64


def test_a_staged_wqe_is_checked_like_any_other() -> None:
    """Staging moves bytes, not rights: a segment outside the consumer's LMRs still fails."""
    fabric, a, b = pair()
    sq, _ = _rings(a)
    alien = (b.address, 64, b.lmr.lmr_context)
    b.memory(0, 64)[:] = b"b" * 64
    write_wqe(sq, Opcode.RDMA_WRITE, 0, 3, [alien], (b.address, 64, b.lmr.rmr_context), stage=0)
    sq.publish()
    a.c.send(_doorbell(a.ep))
    fabric.run()
    assert a.log() == [(DTO, 3, St.DTO_ERR_LOCAL_PROTECTION, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(b.memory(0, 64)) == b"b" * 64


def test_a_doorbell_for_someone_elses_ep_does_nothing() -> None:
    fabric, a, b = pair()
    _write(b, a, 1)  # b's WQE waits for b's doorbell
    a.c.send(_doorbell(b.ep))
    fabric.run()
    assert b.log() == [] and a.log() == []
    assert not a.c.closed_for


def test_a_wqe_that_breaks_the_ep_flushes_the_ones_behind_it_in_order() -> None:
    """Taking the first WQE breaks the connection, which flushes the queue from inside the
    take: the WQEs behind it complete FLUSHED once each, in order, and the IA stays open."""
    fabric, a, b = pair()
    sq, _ = _rings(a)
    alien = (b.address, 64, b.lmr.lmr_context)
    write_wqe(sq, Opcode.RDMA_WRITE, 0, 3, [alien], (b.address, 64, b.lmr.rmr_context))
    sq.publish()
    _write(a, b, 4)
    _write(a, b, 5)
    a.c.send(_doorbell(a.ep))
    fabric.run()
    assert a.log() == [
        (DTO, 3, St.DTO_ERR_LOCAL_PROTECTION, 0),
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 4, St.DTO_ERR_FLUSHED, 0),
        (DTO, 5, St.DTO_ERR_FLUSHED, 0),
    ]
    assert not a.c.closed_for and not a.c.core.catastrophic


def test_runs_of_plain_writes_and_the_wqes_between_them_complete_in_posting_order() -> None:
    """The daemon takes a run of one-segment Writes without building a WQE object and takes
    any other WQE (a Read, a Write of two segments) alone: one burst of each kind in turn
    completes in posting order and lands every byte. A Write whose segment fails its check
    ends the run and breaks the connection at once; the completions keep posting order: the
    Write still outstanding before it FLUSHED, it with its error, then what follows it, which
    never left (a bug fixed with the runs: the failed one completed ahead of the one before)."""
    fabric, a, b = pair()
    sq, _ = _rings(a)
    a.memory(0, 256)[:] = bytes(range(256))
    _write(a, b, 1, 0)
    a.c.core.post(Dtos.RDMA_READ, a.ep, [a.triplet(512, 64)], 2, b.rmr(0, 64), 0)
    _write(a, b, 3, 64)
    two = [a.triplet(128, 32), a.triplet(160, 32)]
    a.c.core.post(Dtos.RDMA_WRITE, a.ep, two, 4, b.rmr(128, 64), 0)
    _write(a, b, 5, 192)
    a.c.send(_doorbell(a.ep))
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 64), (DTO, 2, OK, 64), (DTO, 3, OK, 64), (DTO, 4, OK, 64),
                       (DTO, 5, OK, 64)]  # fmt: skip
    assert bytes(b.memory(0, 256)) == bytes(range(256))
    assert bytes(a.memory(512, 64)) == bytes(range(64))  # the Read saw the first Write
    alien = (b.address, 64, b.lmr.lmr_context)
    _write(a, b, 6)
    write_wqe(sq, Opcode.RDMA_WRITE, 0, 7, [alien], (b.address, 64, b.lmr.rmr_context))
    sq.publish()
    a.memory(256, 64)[:] = b"x" * 64
    _write(a, b, 8, 256)
    a.c.send(_doorbell(a.ep))
    fabric.run()
    assert bytes(b.memory(256, 64)) == bytes(64)  # the Write behind the failed one never left
    assert a.log() == [
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 6, St.DTO_ERR_FLUSHED, 0),
        (DTO, 7, St.DTO_ERR_LOCAL_PROTECTION, 0),
        (DTO, 8, St.DTO_ERR_FLUSHED, 0),
    ]
