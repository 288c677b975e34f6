"""The EVD calls: dat_evd_create, dat_evd_resize, dat_evd_free and dat_evd_post_se, and an
IA's event queues going with it. Each queue is a segment of shared memory the daemon creates,
formats and maps (docs/host-interface.md section 6); Events writes into it."""

from __future__ import annotations

from collections.abc import Sequence

from fabricd.memory import MemoryRegistry
from fabricd.nic.events import Events, queued_events
from fabricd.nic.objects import Consumer, EventQueue
from proto import calls
from proto.constants import DatReturnSubtype as Sub
from proto.constants import EventNumber as E
from proto.errors import (
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatQueueFull,
)
from proto.eventq import EQ_ENTRY_SIZE, EqWord, eq_ring, eq_segment
from proto.events import SoftwareEvent
from proto.hostif import (
    CONSUMER_LINE,
    MAX_ENTRIES,
    PRODUCER_LINE,
    U32,
    RingError,
    RingKind,
    format_ring,
    ring_bytes,
    ring_entries,
)


class EventQueues:
    """The consumers' EVDs as calls make and free them."""

    def __init__(self, memory: MemoryRegistry, events: Events) -> None:
        self.memory = memory
        self.events = events

    def evd_create(self, consumer: Consumer, args: calls.EvdCreate) -> Sequence[object]:
        """dat_evd_create: the EVD's event queue, ``qlen`` events long (the driver names it)."""
        if args.evd in consumer.evds or args.evd <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"EVD handle {args.evd} is taken")
        if not 0 < args.qlen <= MAX_ENTRIES:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"min_qlen {args.qlen} exceeds the max")
        entries = ring_entries(args.qlen)
        name, view = self._place(consumer, args.evd, entries)
        ring = eq_ring(view, entries, producer=True)
        consumer.evds[args.evd] = EventQueue(args.evd, name, ring, args.qlen)
        return (entries,)

    def _place(self, consumer: Consumer, evd: int, entries: int) -> tuple[str, memoryview]:
        """A new, formatted event queue segment of ``entries`` slots for EVD ``evd``."""
        name = eq_segment(consumer.name, evd)
        self.memory.create_segment(name, ring_bytes(entries, EQ_ENTRY_SIZE), consumer.id)
        view = self.memory.map_segment(name)
        format_ring(view, RingKind.EQ, entries, EQ_ENTRY_SIZE)
        return name, view

    def evd_resize(self, consumer: Consumer, args: calls.EvdResize) -> Sequence[object]:
        """dat_evd_resize: the EVD holds ``qlen`` events from now on (an event past them
        overflows it); DAT_INVALID_STATE while more are queued. A ring too small for ``qlen``
        is replaced by a larger one under the same name (docs/host-interface.md section 6);
        a PSP whose CR EVD this is takes ``qlen`` as its backlog."""
        eq = consumer.evds.get(args.evd)
        if eq is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_REQUEST, f"no EVD {args.evd}")
        if not 0 < args.qlen <= MAX_ENTRIES:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"evd_min_qlen {args.qlen} is not 1..max")
        try:
            queued = queued_events(eq)
        except RingError as err:  # the driver broke its own queue: that IA closes
            consumer.channel.close(f"EVD {eq.handle}: {err}")
            raise DatInvalidState(message=f"EVD {eq.handle}: {err}") from None
        if queued > args.qlen:
            raise DatInvalidState(message=f"{queued} events are queued, more than {args.qlen}")
        if ring_entries(args.qlen) > eq.ring.entries:
            self._grow(consumer, eq, ring_entries(args.qlen), queued)
        eq.qlen = args.qlen
        for listener in consumer.psps.values():
            if listener.evd == eq.handle and listener.ep is None:
                listener.backlog = args.qlen
        return (eq.ring.entries,)

    def _grow(self, consumer: Consumer, eq: EventQueue, entries: int, queued: int) -> None:
        """Move the queue to a new ring of ``entries`` slots: the entries not yet taken keep
        their indices (so the driver's own index stays right), the words carry over."""
        old, size = eq.ring, EQ_ENTRY_SIZE
        prod = old.mine
        cons = (prod - queued) % U32
        held = [
            bytes(old.view[old.slot(i) : old.slot(i) + size]) for i in range(cons, cons + queued)
        ]
        words = [
            (w, old.get(w)) for w in (EqWord.OVERFLOW, EqWord.NOTIFIED, EqWord.ARM, EqWord.WANT)
        ]
        self._drop(eq)
        try:
            _, view = self._place(consumer, eq.handle, entries)
        except (OSError, ValueError) as err:  # no memory for the ring: the EVD is lost
            del consumer.evds[eq.handle]
            consumer.channel.close(f"EVD {eq.handle} could not grow: {err}")
            raise DatInsufficientResources(Sub.RESOURCE_MEMORY, str(err)) from None
        ring = eq_ring(view, entries, producer=True)
        for k, entry in enumerate(held):
            at = ring.slot(cons + k)
            view[at : at + size] = entry
        for at, value in [*words, (PRODUCER_LINE, prod), (CONSUMER_LINE, cons)]:
            ring.put(at, value)
        ring.mine = prod
        eq.ring = ring

    def evd_free(self, consumer: Consumer, args: calls.EvdHandle) -> Sequence[object]:
        """dat_evd_free: the queue and its segment go."""
        eq = consumer.evds.pop(args.evd, None)
        if eq is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_REQUEST, f"no EVD {args.evd}")
        self._drop(eq)
        return ()

    def evd_post_se(self, consumer: Consumer, args: calls.EvdPostSe) -> Sequence[object]:
        """dat_evd_post_se: a software event carrying the consumer's pointer value."""
        eq = consumer.evds.get(args.evd)
        if eq is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_REQUEST, f"no EVD {args.evd}")
        if queued_events(eq) >= eq.qlen:
            raise DatQueueFull(message="the EVD is full")
        self.events.push(consumer, E.SOFTWARE_EVENT, SoftwareEvent(args.evd, args.pointer))
        return ()

    def abandon(self, consumer: Consumer) -> None:
        """The IA is gone: every queue and segment of it."""
        for eq in consumer.evds.values():
            self._drop(eq)
        consumer.evds.clear()

    def _drop(self, eq: EventQueue) -> None:
        eq.ring.view.release()
        eq.ring.words.release()
        self.memory.unmap_segment(eq.segment)
        self.memory.remove_segment(eq.segment)
