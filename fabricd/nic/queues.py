"""The work queues of the host interface (docs/host-interface.md): an EP's send and receive
queue in a shared-memory segment the daemon creates with the EP and the driver maps.

The daemon is the consumer of both rings: it takes WQEs on a doorbell (and, before any call of
the IA, from the EPs it polls, so a call never overtakes a post), publishes how many completed
and the EP's state, and trusts nothing it reads: a ring index or WQE that breaks the rules is a
RingError, which closes that IA.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from fabricd.memory import MemoryRegistry
from fabricd.nic.objects import Ep, WorkQueues
from proto.attrs import MAX_IOV
from proto.constants import EpState as S
from proto.hostif import (
    STAGE_BYTES,
    U32,
    Opcode,
    Ring,
    RingError,
    RingKind,
    Word,
    Wqe,
    format_ring,
    read_wqe,
    word_at,
)
from proto.workq import (
    RQ_OFFSET,
    SQ_OFFSET,
    STAGE_OFFSET,
    WQ_ENTRIES,
    WQ_ENTRY_SIZE,
    WQ_SEGMENT_BYTES,
    wq_rings,
    wq_segment,
)

# Ring.words subscripts: the per-request stores skip set_word (Finals: initiator.py says why)
_POLL_AT: Final = word_at(Word.POLL)
_DONE_AT: Final = word_at(Word.DONE)

SQ_OPCODES: Final = frozenset(Opcode) - {Opcode.RECEIVE}
RQ_OPCODES: Final = frozenset({Opcode.RECEIVE})


class Queues:
    """Creating, reading and retiring the EPs' work queues."""

    def __init__(self, memory: MemoryRegistry) -> None:
        self.memory = memory

    def attach(self, ep: Ep) -> None:
        """Create the EP's queue segment, format both rings, publish the EP's state."""
        name = wq_segment(ep.consumer.name, ep.handle)
        self.memory.create_segment(name, WQ_SEGMENT_BYTES, ep.consumer.id)
        view = self.memory.map_segment(name)
        format_ring(view[SQ_OFFSET:RQ_OFFSET], RingKind.SQ, WQ_ENTRIES, WQ_ENTRY_SIZE)
        format_ring(view[RQ_OFFSET:], RingKind.RQ, WQ_ENTRIES, WQ_ENTRY_SIZE)
        sq, rq = wq_rings(view, producer=False)
        ep.queues = WorkQueues(name, sq, rq, view[STAGE_OFFSET : STAGE_OFFSET + STAGE_BYTES])
        publish_state(ep)

    def untaken(self, ep: Ep, receive: bool) -> Iterator[Wqe]:
        """The WQEs of a queue the daemon has not taken yet (to flush them)."""
        q = ep.queues
        if q is None:
            return iter(())
        return take(q.rq, RQ_OPCODES) if receive else take(q.sq, SQ_OPCODES)

    def detach(self, ep: Ep) -> None:
        """The EP is gone: unmap and remove its segment."""
        queues, ep.queues = ep.queues, None
        ep.consumer.polled.pop(ep.handle, None)
        if queues is not None:
            self.memory.unmap_segment(queues.segment)
            self.memory.remove_segment(queues.segment)


def publish_state(ep: Ep) -> None:
    """The EP's state, for the driver's synchronous post checks (the EP driver calls this
    after every change). An EP that leaves CONNECTED is no longer polled."""
    if ep.queues is not None:
        ep.queues.sq.set_word(Word.STATE, ep.state)
        if ep.state != S.CONNECTED:
            set_polling(ep.queues, False)


def posted(q: WorkQueues) -> bool:
    """Has the driver published WQEs the daemon has not taken, on either queue? (Two index
    reads: an empty look stops here.)"""
    return bool(q.sq.available() or q.rq.available())


def watch(ep: Ep, q: WorkQueues) -> None:
    """WQEs of the EP were taken: POLL 1, and the EP joins its consumer's polled EPs. Only
    those can hold WQEs no doorbell announced (a driver skips it when it sees POLL 1; one in
    flight is handled before any later frame), so a call drains just them. An EP leaves the set
    when a look after POLL 0 and the full barrier finds nothing, or with its queues."""
    set_polling(q, True)
    ep.consumer.polled[ep.handle] = ep


def set_polling(q: WorkQueues, on: bool) -> None:
    """Say whether the daemon will look at the queues again without a doorbell (POLL)."""
    if q.polling != on:
        q.polling = on
        q.sq.words[_POLL_AT] = int(on)


def retired(ep: Ep, receive: bool, count: int = 1) -> None:
    """WQEs of the EP completed: count them where the driver sees it (before the completions
    are delivered, so a driver that has the event also sees the slot free)."""
    q = ep.queues
    if q is None:
        return
    if receive and ep.srq is not None:  # the SRQ's receive: counted on the SRQ's ring
        srq = ep.srq
        srq.done += count
        srq.ring.set_word(Word.DONE, srq.done)
    elif receive:
        q.rq_done += count
        q.rq.set_word(Word.DONE, q.rq_done)
    else:
        q.sq_done += count
        q.sq.words[_DONE_AT] = q.sq_done % U32


def bound(ep: Ep) -> None:
    """One RMR bind of the EP completed: count it (the driver's outstanding binds), before
    its completion is delivered, as for a WQE (a SUPPRESSed bind has no event at all)."""
    q = ep.queues
    if q is not None:
        q.bound += 1
        q.sq.set_word(Word.BOUND, q.bound)


def doorbell(ep: Ep) -> None:
    """A doorbell of the EP was taken: count it, so the driver knows none is in flight."""
    q = ep.queues
    if q is not None:
        q.heard += 1
        q.sq.set_word(Word.HEARD, q.heard)


def take(ring: Ring, opcodes: frozenset[Opcode]) -> Iterator[Wqe]:
    """The WQEs the driver has published, in order, each released back as it is read. The
    producer's index is read once per run of WQEs, not per WQE; handling a WQE can flush the
    queue (its EP broke), so a run stops where another taker moved the index."""
    count = ring.available()
    while count:
        index = ring.mine
        wqe = _checked(ring, opcodes)
        ring.publish()
        yield wqe
        # the count holds while nobody else took from the ring (a flush); past it, look again
        count = count - 1 if ring.mine == (index + 1) % U32 else 0
        count = count or ring.available()


def take_one(ring: Ring, opcodes: frozenset[Opcode]) -> Wqe | None:
    """The next WQE the driver has published, released back (None: there is none)."""
    if not ring.available():
        return None
    wqe = _checked(ring, opcodes)
    ring.publish()
    return wqe


def _checked(ring: Ring, opcodes: frozenset[Opcode]) -> Wqe:
    """The WQE at the ring's index, read and checked (RingError if it breaks a rule or does
    not belong on this queue)."""
    wqe = read_wqe(ring, ring.mine, MAX_IOV)
    if wqe.opcode not in opcodes:
        raise RingError(f"WQE {ring.mine}: {wqe.opcode.name} does not belong on this queue")
    return wqe
