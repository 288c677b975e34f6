"""The EP driver: the one writer of ``Ep.state``, through the EP table (proto.ep_states).

Leaving a connection completes the failed DTO with its error, then posts the connection event,
then flushes every other outstanding DTO in posting order, exactly once.
"""

from __future__ import annotations

from fabricd.memory import MemoryRegistry
from fabricd.nic.events import Events
from fabricd.nic.objects import Consumer, Ep, Listeners, Op
from fabricd.nic.queues import Queues, publish_state
from fabricd.nic.runs import expand
from fabricd.nic.wire import Wire
from proto import ep_states
from proto.attrs import EpAttr
from proto.codec import encode
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, EpAsyncErrorReason
from proto.constants import EpState as S
from proto.constants import EventNumber as E
from proto.ep_states import EpInput
from proto.events import AsyncError
from proto.frames import FrameType
from proto.hostif import ASYNC_EVD, OPCODE_DTOS, RingError

DISCONNECT = encode(FrameType.DISCONNECT)


class EpDriver:
    """Moves endpoints through their states, and completes and flushes their DTOs."""

    def __init__(
        self,
        wire: Wire,
        events: Events,
        memory: MemoryRegistry,
        listeners: Listeners,
        queues: Queues,
    ) -> None:
        self.wire = wire
        self.events = events
        self.memory = memory
        self.listeners = listeners
        self.queues = queues

    def add(self, ep: Ep) -> Ep:
        """A new EP joins its consumer, with its work queues."""
        ep.consumer.eps[ep.handle] = ep
        self.queues.attach(ep)
        return ep

    def provide(self, consumer: Consumer, handle: int) -> Ep:
        """The EP a PSP with the PROVIDER flag makes for a request: TENTATIVE_CONNECTION_PENDING,
        with no PZ or EVDs until dat_ep_modify."""
        return self.add(Ep(handle, consumer, 0, 0, 0, 0, EpAttr(), S.TENTATIVE_CONNECTION_PENDING))

    def input(
        self,
        ep: Ep,
        what: EpInput,
        private_data: bytes = b"",
        first_status: St | None = None,
        notify_peer: bool = False,
    ) -> None:
        """Apply one input of the EP table (DAT_INVALID_STATE if the table has no such row)."""
        if ep.handle not in ep.consumer.eps:
            return
        before = ep.state
        ep.state, event = ep_states.transition(ep.state, what)
        publish_state(ep)
        leaving = ep.state == S.DISCONNECTED and before != S.DISCONNECTED
        if leaving:
            self._leave(ep, what, first_status, notify_peer)
        if event is not None:
            self.events.connection(ep, event, private_data)
        if leaving:
            self.flush(ep)
            if ep.srq is not None:
                self.events.srq_detached(ep)
        elif ep.state == S.DISCONNECT_PENDING:
            self.drained(ep)
        elif ep.state == S.CONNECTED and before != S.CONNECTED:
            self.watermarks(ep)  # a hard watermark applies from the connection on

    def _leave(self, ep: Ep, what: EpInput, first_status: St | None, notify_peer: bool) -> None:
        """The connection is over: drop the link, complete the failed DTO first."""
        self.cancel_timer(ep)
        link, ep.link = ep.link, None
        if link is not None:
            if notify_peer:
                self.wire.send(link, DISCONNECT)
            link.ep = None
            self.wire.drop(link, what.name.lower())
        ops = expand(ep)
        if first_status is not None and ops:
            self.complete(ep, ops.popleft(), first_status)

    def flush(self, ep: Ep, first_status: St | None = None) -> None:
        """Complete every outstanding DTO: the failed one with its error (the first, or one
        done with an error it has not reported), the rest FLUSHED, those still in the work
        queues too (posted last, so flushed last), as a NIC does."""
        ops = expand(ep)
        ep.held.clear()
        ep.reads_out = 0
        while ops:
            op = ops.popleft()
            status = first_status if first_status is not None else St.DTO_ERR_FLUSHED
            first_status = None
            self.complete(ep, op, op.status if op.done and op.status != St.DTO_SUCCESS else status)
        if ep.taking is not None:  # taken by a message that never finished: the oldest receive
            recv, ep.taking = ep.taking, None
            self.events.received(ep, recv.cookie, St.DTO_ERR_FLUSHED)
        try:
            for wqe in self.queues.untaken(ep, receive=False):
                op = Op(OPCODE_DTOS[wqe.opcode], wqe.cookie, wqe.flags, 0, 0, [])
                self.complete(ep, op, St.DTO_ERR_FLUSHED)
            while ep.recvs and ep.srq is None:  # an SRQ's receives stay for its other EPs
                self.events.received(ep, ep.recvs.popleft().cookie, St.DTO_ERR_FLUSHED)
            for wqe in self.queues.untaken(ep, receive=True):
                self.events.received(ep, wqe.cookie, St.DTO_ERR_FLUSHED)
        except RingError as err:  # the driver broke its own queue: that IA closes
            ep.consumer.channel.close(f"EP {ep.handle}: {err}")

    def complete(self, ep: Ep, op: Op, status: St) -> None:
        """One request DTO or bind completes; a bind that did not execute frees its key."""
        if op.kind == Dtos.BIND_MW and op.bind is not None and status != St.DTO_SUCCESS:
            self.memory.unbind(op.bind.key)
        self.events.completed(ep, op, status)

    def complete_run(self, ep: Ep, ops: list[Op]) -> None:
        """Successful request DTOs (no binds) complete, in posting order, together."""
        if ops:
            self.events.dtos_done(ep, ops)

    def cancel_timer(self, ep: Ep) -> None:
        """Stop the connect timeout."""
        if ep.timer is not None:
            ep.timer.cancel()
            ep.timer = None

    def drained(self, ep: Ep) -> None:
        """A graceful disconnect completes once the last outstanding DTO has."""
        if ep.state == S.DISCONNECT_PENDING and not ep.ops:
            self.input(ep, EpInput.DRAINED, notify_peer=True)

    def broken(self, ep: Ep, first_status: St | None = None, notify_peer: bool = False) -> None:
        """A DTO failed or the link broke: BROKEN, where the EP's state has such a row."""
        if (ep.state, EpInput.BROKEN) in ep_states.TABLE:
            self.input(ep, EpInput.BROKEN, first_status=first_status, notify_peer=notify_peer)

    def watermarks(self, ep: Ep) -> None:
        """dat_ep_set_watermark's marks against the EP's receive buffers (posted, not yet
        completed): past the soft one, DAT_ASYNC_ERROR_EP_BROKEN with reason
        DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT on the async EVD, once per setting; past the hard one,
        a connected EP breaks (BROKEN on its connect EVD). An EP of an SRQ holds only the
        receive a message landing now has taken (the rest are the SRQ's)."""
        held = (0 if ep.srq is not None else len(ep.recvs)) + (ep.taking is not None)
        if 0 <= ep.soft_hw < held:
            ep.soft_hw = -1
            reason = EpAsyncErrorReason.SRQ_SOFT_HIGH_WATERMARK_EVENT
            record = AsyncError(ASYNC_EVD, ep.handle, reason)
            self.events.push(ep.consumer, E.ASYNC_ERROR_EP_BROKEN, record)
        if 0 <= ep.hard_hw < held and ep.state == S.CONNECTED:
            self.broken(ep, notify_peer=True)

    def destroy(self, ep: Ep) -> None:
        """Implicit abrupt disconnect, then forget the EP (no events: the EP is gone)."""
        consumer = ep.consumer
        if ep.link is not None:
            self.wire.send(ep.link, DISCONNECT)
            self.wire.drop(ep.link, "endpoint freed")
        self.cancel_timer(ep)
        if ep.rsp is not None:
            self.listeners.remove(ep.rsp)
        consumer.eps.pop(ep.handle, None)
        self.queues.detach(ep)
        if ep.pz in consumer.pzs:
            consumer.pzs[ep.pz] -= 1
        ep.ops.clear()
        ep.taking = None
        if ep.srq is not None:
            ep.srq.eps.pop(ep.handle, None)
        else:
            ep.recvs.clear()
