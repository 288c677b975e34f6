"""Event delivery: completions and connection events, coalesced into one EVENTS frame per
consumer per loop turn, in the order the NIC produced them."""

from __future__ import annotations

from collections.abc import Callable

from fabricd.nic.objects import Consumer, Ep, Op
from fabricd.nic.queues import retired
from proto.codec import encode
from proto.constants import CompletionFlags, Dtos
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.events import ConnectionEvent, DtoCompletion, Event, RmrBindCompletion
from proto.frames import FrameType


class Events:
    """The consumers' event queues and their flush."""

    def __init__(self, call_soon: Callable[[Callable[[], None]], None]) -> None:
        self._call_soon = call_soon
        self._dirty: list[Consumer] = []

    def push(self, consumer: Consumer, number: E, record: Event) -> None:
        """Queue an event; all queued events leave in one frame per loop turn."""
        if consumer.closed:
            return
        if consumer.queue(number, record):
            if not self._dirty:
                self._call_soon(self.flush)
            self._dirty.append(consumer)

    def flush(self) -> None:
        """Send every consumer its queued events (coalesced completion push)."""
        dirty, self._dirty = self._dirty, []
        for consumer in dirty:
            if consumer.events and not consumer.closed:
                consumer.channel.send(encode(FrameType.EVENTS, consumer.events))
            consumer.events = []

    def dto(
        self, ep: Ep, evd: int, cookie: int, status: St, length: int, op: Dtos, notify: bool = True
    ) -> None:
        """A DTO completion; ``notify`` False: an UNSIGNALLED one, which wakes nobody."""
        record = DtoCompletion(evd, ep.handle, cookie, status, length, op, notify)
        self.push(ep.consumer, E.DTO_COMPLETION_EVENT, record)

    def received(self, ep: Ep, cookie: int, status: St, length: int = 0) -> None:
        """A receive's completion on the EP's receive EVD."""
        retired(ep, receive=True)
        self.dto(ep, ep.recv_evd, cookie, status, length, Dtos.RECEIVE)

    def connection(self, ep: Ep, number: E, private_data: bytes = b"") -> None:
        """A connection event on the EP's connect EVD, with the EP's state after it."""
        record = ConnectionEvent(ep.connect_evd, ep.handle, private_data, ep.state)
        self.push(ep.consumer, number, record)

    def completed(self, ep: Ep, op: Op, status: St) -> None:
        """A request DTO or bind completes: SUPPRESS (success) gives no event, UNSIGNALLED
        (success) an event that wakes nobody."""
        success = status == St.DTO_SUCCESS
        evd = 0 if success and op.flags & CompletionFlags.SUPPRESS else ep.request_evd
        notify = not (success and op.flags & CompletionFlags.UNSIGNALLED)
        if op.kind == Dtos.BIND_MW:
            rmr = op.bind.rmr.handle if op.bind else 0
            record = RmrBindCompletion(evd, ep.handle, rmr, op.cookie, status, notify)
            self.push(ep.consumer, E.RMR_BIND_COMPLETION_EVENT, record)
            return
        retired(ep, receive=False)
        self.dto(ep, evd, op.cookie, status, op.length if success else 0, op.kind, notify)
