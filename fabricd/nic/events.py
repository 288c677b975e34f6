"""Event delivery: every event goes into its EVD's event queue in shared memory
(docs/host-interface.md), in the order the NIC produced it, whatever its kind; a driver that
armed a queue before sleeping gets one NOTIFY frame per loop turn.

The queues are created and freed by the EVD calls (evds.py); dat_evd_post_se's software
events are written here too, so one writer fills each ring.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Final

from fabricd.memory import MemoryRegistry
from fabricd.nic.objects import Consumer, Ep, EventQueue, Op, Srq
from fabricd.nic.queues import bound, retired
from proto.codec import encode
from proto.constants import CompletionFlags, Dtos, EpAsyncErrorReason, SrqAsyncErrorReason
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.errors import MalformedFrame
from proto.eventq import (
    EQE_BODY_MAX,
    EqWord,
    newest_length,
    write_eqe,
)
from proto.events import (
    IMMEDIATE,
    AsyncError,
    ConnectionEvent,
    Event,
    RmrBindCompletion,
    Row,
    dto_entry,
    dto_number,
    encode_event,
    srq_marked,
    write_dtos,
    write_rows,
)
from proto.frames import FrameType
from proto.hostif import (
    ASYNC_EVD,
    RingError,
)

log = logging.getLogger("fabricd")
_ARM_AT: Final = EqWord.ARM // 4  # Ring.words' subscript of the driver's ARM word
_SUPPRESS: Final = int(CompletionFlags.SUPPRESS)  # plain ints: IntFlag operators are slow
_UNSIGNALLED: Final = int(CompletionFlags.UNSIGNALLED)
MODERATED_BYTES: Final = 16 * 1024  # a bulk completion: its driver sleeps, its NOTIFY waits
_SRQ_EVENT: Final = E.ASYNC_ERROR_PROVIDER_INTERNAL_ERROR
"""The async event number of an SRQ's events (the reason says which)."""
_RECEIVE: Final = Dtos.RECEIVE  # (Finals: nic/initiator.py says why)


def ends_bulk(eq: EventQueue) -> bool:
    """Is the newest entry of the queue a bulk completion (MODERATED_BYTES or more)? Its
    driver sleeps on such a queue rather than spins (the client's POLL_BULK, libdatfabric's
    DF_POLL_BULK): its NOTIFY waits for the daemon's input to drain, and its next post comes
    after that wake-up."""
    return newest_length(eq.ring) >= MODERATED_BYTES


def queued_events(eq: EventQueue) -> int:
    """Events in the queue the driver has not taken (its index is checked)."""
    return eq.ring.entries - eq.ring.space()


class Events:
    """The consumers' event queues as the NIC fills them: their entries, overflow, NOTIFY."""

    def __init__(
        self,
        call_soon: Callable[[Callable[[], None]], None],
        call_idle: Callable[[Callable[[], None]], None],
        memory: MemoryRegistry,
    ) -> None:
        self._call_soon = call_soon
        self._call_idle = call_idle
        self.memory = memory
        self._due: list[tuple[Consumer, EventQueue]] = []

    # -- producing -----------------------------------------------------------------------------

    def push(self, consumer: Consumer, number: E, record: Event) -> None:
        """Write one event into its EVD's queue (``evd`` 0 or a freed EVD: nowhere)."""
        eq = self._evd(consumer, record.evd)
        if eq is None:
            return
        flags, fields, body = encode_event(number, record)
        if len(body) > EQE_BODY_MAX:
            raise MalformedFrame(f"{number.name} of {len(body)} bytes does not fit an entry")
        self._write(consumer, eq, number, flags, fields, body)

    def bulk(self, ep: Ep) -> bool:
        """Did the EP's request EVD last take a bulk completion (``ends_bulk``)?"""
        consumer = ep.consumer  # ``_evd``, inline: every retire asks
        eq = consumer.evds.get(ep.request_evd) if not consumer.closed else None
        return eq is not None and ends_bulk(eq)

    def _evd(self, consumer: Consumer, evd: int) -> EventQueue | None:
        """The consumer's EVD ``evd`` (None: 0, freed, or its IA closed: events go nowhere)."""
        return consumer.evds.get(evd) if not consumer.closed else None

    def _write(
        self,
        consumer: Consumer,
        eq: EventQueue,
        number: int,
        flags: int,
        fields: tuple[int, int, int, int, int],
        body: bytes = b"",
    ) -> None:
        room = self._room(consumer, eq)
        if room is None:
            return
        if room > 0:
            write_eqe(eq.ring, number, flags, fields, body)
        self._filled(consumer, eq, int(room > 0), room <= 0)

    def _room(self, consumer: Consumer, eq: EventQueue) -> int | None:
        """How many more entries the EVD's queue takes (its qlen less what it holds: 0 or
        less, full); None when the driver broke its own queue, and that IA is closed. Then
        the entries are written (``write_eqe``, ``write_dtos``, ``write_rows``: how many, and
        whether one found no room) and ``_filled`` publishes them."""
        ring = eq.ring
        try:
            return eq.qlen - ring.entries + ring.space()  # qlen - queued_events(eq)
        except RingError as err:
            consumer.channel.close(f"EVD {eq.handle}: {err}")
            return None

    def _filled(self, consumer: Consumer, eq: EventQueue, written: int, overflow: bool) -> None:
        """``written`` entries are in the EVD's queue, and one more found no room (``overflow``:
        the EVD overflowed): they are published."""
        if overflow:
            self._overflow(consumer, eq)
        if written:
            eq.ring.publish(written)
            self._written(consumer, eq)

    def _written(self, consumer: Consumer, eq: EventQueue) -> None:
        """The queue was written this turn: it is looked at for NOTIFY at the turn's end."""
        if not eq.due:
            eq.due = True
            if not self._due:
                self._call_soon(self.flush)
            self._due.append((consumer, eq))

    def _overflow(self, consumer: Consumer, eq: EventQueue) -> None:
        """The EVD is full: the event is lost, the EVD overflowed (DAT_ASYNC_ERROR_EVD_OVERFLOW
        on the async EVD, once)."""
        if eq.overflowed:
            return
        eq.overflowed = True
        eq.ring.put(EqWord.OVERFLOW, 1)
        log.info("consumer %s: EVD %d overflowed", consumer.name, eq.handle)
        if eq.handle != ASYNC_EVD:
            record = AsyncError(ASYNC_EVD, eq.handle, 0)
            self.push(consumer, E.ASYNC_ERROR_EVD_OVERFLOW, record)

    def flush(self) -> None:
        """Notify every driver that armed a queue written this turn, once it holds WANT events
        (the full barrier orders our index store before reading ARM, as the driver orders its
        ARM store before reading our index: one of the two sees the other); when each queue
        ends in a bulk completion, once the daemon's input drains (docs: moderation)."""
        due, self._due = self._due, []
        if not due:
            return
        self.memory.fence()
        wake: dict[int, tuple[Consumer, list[EventQueue]]] = {}
        for consumer, eq in due:
            eq.due = False
            if self._answer_arm(consumer, eq):
                wake.setdefault(consumer.id, (consumer, []))[1].append(eq)
        for consumer, eqs in wake.values():
            send = partial(consumer.channel.send, encode(FrameType.NOTIFY, [q.handle for q in eqs]))
            if all(map(ends_bulk, eqs)):
                self._call_idle(send)
            else:
                send()

    def _answer_arm(self, consumer: Consumer, eq: EventQueue) -> bool:
        """Does the driver's ARM of ``eq`` get its NOTIFY now (marked NOTIFIED)?"""
        if consumer.closed or consumer.evds.get(eq.handle) is not eq:
            return False
        arm = eq.ring.words[_ARM_AT]  # ring.get(EqWord.ARM), inline: every turn asks
        if arm == eq.notified:
            return False
        try:
            queued = queued_events(eq)
        except RingError as err:
            consumer.channel.close(f"EVD {eq.handle}: {err}")
            return False
        if queued < eq.ring.get(EqWord.WANT):
            return False
        eq.notified = arm
        eq.ring.put(EqWord.NOTIFIED, arm)
        return True

    # -- what the NIC produces -------------------------------------------------------------

    def dto(
        self,
        ep: Ep,
        evd: int,
        cookie: int,
        status: St,
        length: int,
        op: Dtos,
        notify: bool = True,
        body: bytes = b"",
        srq: int = 0,
    ) -> None:
        """A DTO completion; ``notify`` False: an UNSIGNALLED one, which wakes nobody; ``srq``:
        the SRQ a receive came from. Written straight into the entry (proto.events.dto_entry):
        no record on the per-DTO path."""
        consumer = ep.consumer
        eq = self._evd(consumer, evd)
        if eq is not None:
            flags, head = dto_entry(ep.handle, status, cookie, length, op, notify)
            if srq:
                flags, body = srq_marked(flags, body, srq)
            self._write(consumer, eq, dto_number(op), flags, head, body)

    def received(
        self, ep: Ep, cookie: int, status: St, length: int = 0, immediate: int | None = None
    ) -> None:
        """A receive's completion on the EP's receive EVD; with ``immediate``: consumed by an
        RDMA Write with immediate data (DAT_IB_DTO_EVENT, DAT_IB_DTO_RECV_IMMED)."""
        retired(ep, receive=True)
        srq = ep.srq.handle if ep.srq is not None else 0
        if immediate is None:
            self.dto(ep, ep.recv_evd, cookie, status, length, Dtos.RECEIVE, srq=srq)
            return
        body = IMMEDIATE.pack(immediate)
        self.dto(ep, ep.recv_evd, cookie, status, length, Dtos.IB_RECV_IMMED, body=body, srq=srq)

    def srq_low(self, srq: Srq) -> None:
        """dat_srq_set_lw's event, once per arming: the SRQ holds fewer receives than its low
        watermark (DAT_SRQ_LOW_WATERMARK_EVENT on the async EVD, the SRQ's handle)."""
        if srq.armed and len(srq.recvs) < srq.low_watermark:
            srq.armed = False
            record = AsyncError(ASYNC_EVD, srq.handle, SrqAsyncErrorReason.LOW_WATERMARK_EVENT)
            self.push(srq.consumer, _SRQ_EVENT, record)

    def srq_error(self, srq: Srq) -> None:
        """The SRQ went to its error state (a receive posted to it failed its checks)."""
        record = AsyncError(ASYNC_EVD, srq.handle, SrqAsyncErrorReason.TRANSFER_TO_ERROR)
        self.push(srq.consumer, _SRQ_EVENT, record)

    def srq_detached(self, ep: Ep) -> None:
        """An EP of an SRQ left its connection: it takes no more of the SRQ's receives, and
        every one it took has completed (InfiniBand's "last WQE reached"; DAT_ASYNC_ERROR_
        EP_BROKEN on the async EVD, the EP's handle, as OFED's dapl reports it)."""
        record = AsyncError(ASYNC_EVD, ep.handle, EpAsyncErrorReason.TRANSFER_TO_ERROR)
        self.push(ep.consumer, E.ASYNC_ERROR_EP_BROKEN, record)

    def connection(self, ep: Ep, number: E, private_data: bytes = b"") -> None:
        """A connection event on the EP's connect EVD, with the EP's state after it."""
        record = ConnectionEvent(ep.connect_evd, ep.handle, private_data, ep.state)
        self.push(ep.consumer, number, record)

    def dtos_done(self, ep: Ep, ops: Sequence[Op]) -> None:
        """Request DTOs (no binds) of the EP that completed successfully, in order: the
        driver's DONE moves once for all of them, then their completions are written and
        published together (SUPPRESS: no event; UNSIGNALLED: one that wakes nobody). What
        completed() does for one, coalesced."""
        retired(ep, receive=False, count=len(ops))
        eq = self._evd(ep.consumer, ep.request_evd)
        room = self._room(ep.consumer, eq) if eq is not None else None
        if eq is not None and room is not None:
            written, overflow = write_dtos(eq.ring, room, ep.handle, ops)
            self._filled(ep.consumer, eq, written, overflow)

    def rows_done(
        self, ep: Ep, kind: Dtos, rows: Sequence[Row], fields: tuple[int, int, int]
    ) -> None:
        """dtos_done of DTOs of one kind given as rows (proto.events.write_rows): a run's plain
        Writes or Sends, or a lone Read (runs.Run, plainwqe.PLAIN_AT), or receives (no SRQ)
        that Sends of a run filled (send_run.SendRun, RECEIVED_AT; their completions always
        notify)."""
        receive = kind == _RECEIVE
        retired(ep, receive=receive, count=len(rows))
        consumer = ep.consumer  # ``_evd``, inline: every completion run asks
        eq = consumer.evds.get(ep.recv_evd if receive else ep.request_evd)
        room = self._room(consumer, eq) if eq is not None and not consumer.closed else None
        if eq is not None and room is not None:
            written, overflow = write_rows(eq.ring, room, ep.handle, kind, rows, fields)
            self._filled(consumer, eq, written, overflow)

    def completed(self, ep: Ep, op: Op, status: St) -> None:
        """A request DTO or bind completes: SUPPRESS (success) gives no event, UNSIGNALLED
        (success) an event that wakes nobody. The driver's counts move first."""
        success = status == St.DTO_SUCCESS
        evd = 0 if success and op.flags & _SUPPRESS else ep.request_evd
        notify = not (success and op.flags & _UNSIGNALLED)
        if op.kind == Dtos.BIND_MW:
            bound(ep)
            rmr = op.bind.rmr.handle if op.bind else 0
            record = RmrBindCompletion(evd, ep.handle, rmr, op.cookie, status, notify)
            self.push(ep.consumer, E.RMR_BIND_COMPLETION_EVENT, record)
            return
        retired(ep, receive=False)
        self.dto(ep, evd, op.cookie, status, op.length if success else 0, op.kind, notify)
