"""The consumer core's event path (client.core.ClientCore is an EventPath): EVDs and CNOs as the
driver keeps them, their event queues read from the rings the daemon fills (docs/host-interface.md
section 6), dat_evd_dequeue, the pieces of dat_evd_wait and dat_cno_wait both APIs drive, and
software events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from client import _ringtake as ringtake
from client.records import Call as Call
from client.records import CrInfo as CrInfo
from client.records import EpMirror, EvdState, QueueMapper, mean_step
from client.records import Event as Event
from client.records import LmrInfo as LmrInfo
from client.records import Op as Op
from proto import calls, events
from proto.attrs import EpAttr
from proto.checks import is_int
from proto.constants import (
    IB_EXT_TYPES,
    DatReturnSubtype,
    Dtos,
    EpState,
    EvdFlags,
    EventNumber,
    ProxyType,
)
from proto.constants import EvdState as EvdStateFlags
from proto.errors import (
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatQueueEmpty,
    DatTimeoutExpired,
)
from proto.eventq import (
    EQ_ENTRY_SIZE,
    eq_ring,
    eq_segment,
    read_eqe,
)
from proto.events import decode_event
from proto.hostif import ASYNC_EVD, RingKind, check_descriptor

Sub = DatReturnSubtype
Triplet = Sequence[int]

_DTO_COMPLETION: Final = EventNumber.DTO_COMPLETION_EVENT


class EventPath:
    """Everything of ClientCore that reads or waits on events; the state it shares with the
    rest of the core is declared here and set up by ClientCore.__init__."""

    name: str
    mapper: QueueMapper
    evds: dict[int, EvdState]
    eps: dict[int, EpMirror]
    crs: dict[int, CrInfo]
    cnos: dict[int, set[int]]
    agents: dict[int, Any]
    catastrophic: bool
    _handles: int
    _pointers: dict[int, Any]
    _token: int
    srqs: dict[int, Any]  # client.srqs.SrqMirror by handle
    reaped: Callable[[Event], Event]  # SrqCalls'

    # -- events --------------------------------------------------------------------------------

    def refill(self, evd: EvdState) -> None:
        """Read the entries the daemon added to ``evd``'s queue since the last look (they keep
        their slots until handed out): the plain DTO completions of each run of slots up to the
        ring's end in C (client._ringtake, which stops at any other entry), the others here,
        the EVD's counts kept in locals and stored once (an entry that is garbage raises
        RingError with those before it queued and counted)."""
        ring = evd.ring
        if ring is None or self.catastrophic:
            return
        ready, taken = ring.available(), evd.from_ring
        queue, handle = evd.queue, evd.handle
        dto_bytes, notifying = evd.dto_bytes, evd.notifying
        try:
            while taken < ready:
                first = (ring.mine + taken) & ring.mask
                run = min(ready - taken, ring.entries - first)
                events, notifies, dto_bytes = ringtake.completions(
                    ring.view, first, run, Event, _DTO_COMPLETION, handle, dto_bytes
                )
                queue.extend(events)
                taken += len(events)
                notifying += notifies
                if len(events) < run:  # checked: RingError if garbage
                    raw, flags, head, body = read_eqe(ring, ring.mine + taken)
                    event = self._event(*decode_event(handle, raw, flags, head, body))
                    if raw == _DTO_COMPLETION:  # an SRQ's receive (decode_event reads it)
                        dto_bytes = mean_step(dto_bytes, event.transfered_length)
                    taken += 1
                    queue.append(event)
                    notifying += event.notify
        finally:
            evd.from_ring, evd.dto_bytes, evd.notifying = taken, dto_bytes, notifying

    def _event(self, number: EventNumber, ev: events.Event) -> Event:
        """One event of the daemon as the API hands it out, updating the mirrors it concerns."""
        if isinstance(ev, events.DtoCompletion):
            event = Event(
                number, ev.evd, ev.ep, ev.cookie, ev.status, ev.length, ev.op, notify=ev.notify
            )
            if number == EventNumber.IB_DTO_EVENT:
                event.ext_type, event.immed_data = IB_EXT_TYPES[Dtos(ev.op)], ev.immediate
            event.srq = ev.srq
            return event
        if isinstance(ev, events.RmrBindCompletion):
            return Event(
                number,
                ev.evd,
                ev.ep,
                ev.cookie,
                ev.status,
                handle=ev.rmr,
                operation=Dtos.BIND_MW,
                notify=ev.notify,
            )
        if isinstance(ev, events.ConnectionRequest):
            return self._request(number, ev)
        if isinstance(ev, events.ConnectionEvent):
            if ev.ep in self.eps:
                self.eps[ev.ep].state = EpState(ev.state)
            return Event(number, ev.evd, ep=ev.ep, private_data=ev.private_data)
        if isinstance(ev, events.SoftwareEvent):
            return Event(number, ev.evd, pointer=self._pointers.pop(ev.pointer, ev.pointer))
        return Event(number, ev.evd, handle=ev.handle, reason=ev.reason)

    def _request(self, number: EventNumber, ev: events.ConnectionRequest) -> Event:
        self.crs[ev.cr] = CrInfo(
            ev.cr, ev.sp, ev.conn_qual, ev.remote_address, ev.private_data, ev.ep
        )
        if ev.ep in self.eps:
            self.eps[ev.ep].state = EpState.PASSIVE_CONNECTION_PENDING
        elif ev.ep:  # a PSP with the PROVIDER flag made this EP for the request
            self.eps[ev.ep] = EpMirror(
                ev.ep, 0, 0, 0, 0, EpAttr(), EpState.TENTATIVE_CONNECTION_PENDING
            )
        return Event(
            number,
            ev.evd,
            ep=ev.ep,
            sp=ev.sp,
            conn_qual=ev.conn_qual,
            cr=ev.cr,
            remote_address=ev.remote_address,
            private_data=ev.private_data,
        )

    # -- objects kept here ---------------------------------------------------------------------

    def new_handle(self) -> int:
        """A consumer-side handle (EVDs live in the consumer)."""
        self._handles += 1
        return self._handles

    def evd_create(self, min_qlen: int, flags: int, cno: int = 0) -> Op:
        """dat_evd_create: an EVD of at least ``min_qlen`` entries; its event queue is placed
        by the daemon."""
        if not is_int(min_qlen) or min_qlen <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG2, "min_qlen must be positive")
        if not is_int(flags) or flags & ~int(EvdFlags.DEFAULT | EvdFlags.SOFTWARE):
            raise DatInvalidParameter(Sub.INVALID_ARG4, f"bad EVD flags {flags!r}")
        if cno:
            self.cno_check(cno)
        handle = self.new_handle()
        (entries,) = yield Call("evd_create", calls.EvdCreate(handle, min_qlen))
        self.evds[handle] = EvdState(handle, min_qlen, EvdFlags(flags), cno=cno)
        self._map_queue(self.evds[handle], entries)
        if cno:
            self.cnos[cno].add(handle)
        return handle

    def async_evd_create(self) -> Op:
        """The async EVD's event queue (the driver asks for it right after HELLO)."""
        evd = self.evds[ASYNC_EVD]
        (entries,) = yield Call("evd_create", calls.EvdCreate(ASYNC_EVD, evd.qlen))
        self._map_queue(evd, entries)

    def _map_queue(self, evd: EvdState, entries: int) -> None:
        view = self.mapper.map(eq_segment(self.name, evd.handle))
        check_descriptor(view, RingKind.EQ, entries, EQ_ENTRY_SIZE)
        evd.ring = eq_ring(view, entries, producer=False)

    def evd_ready(self, evd: EvdState, threshold: int) -> bool:
        """Would a waiter of ``evd`` wake now (after reading its queue)?"""
        self.refill(evd)
        return evd.ready(threshold)

    def arm(self, evds: Sequence[EvdState], threshold: int) -> None:
        """Before sleeping: ask the daemon to NOTIFY when one of ``evds`` holds ``threshold``
        events; then a full barrier, so the caller's next look at the rings is ordered after
        the ARM stores (if the daemon missed the ARM, that look finds its events)."""
        for evd in evds:
            evd.arm(threshold)
        self.mapper.fence()

    def evd_wait_begin(self, handle: int, threshold: int) -> EvdState:
        """The checks of dat_evd_wait; marks the EVD as having its one waiter."""
        evd = self.evd(handle)
        if not is_int(threshold) or threshold <= 0 or threshold > evd.qlen:
            raise DatInvalidParameter(Sub.INVALID_ARG3, f"bad threshold {threshold!r}")
        if evd.waiting:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_WAITER, "the EVD already has a waiter")
        if not evd.waitable:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_UNWAITABLE, "the EVD is unwaitable")
        if evd.overflowed:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_IN_USE, "the EVD overflowed")
        evd.waiting = True
        return evd

    @staticmethod
    def evd_timeout(evd: EvdState, threshold: int, timeout: int) -> DatTimeoutExpired:
        """DAT_TIMEOUT_EXPIRED for a wait, with ``nmore`` (the events queued meanwhile)."""
        err = DatTimeoutExpired(message=f"no {threshold} events within {timeout} us")
        err.nmore = len(evd.queue)
        return err

    def evd_post_se(self, handle: int, pointer: Any) -> Op:
        """dat_evd_post_se: a software event on an EVD created with the SOFTWARE flag (the
        daemon queues it, so it keeps its place among the others)."""
        evd = self.evd(handle)
        if not evd.flags & EvdFlags.SOFTWARE:
            raise DatInvalidParameter(Sub.INVALID_ARG1, "the EVD takes no software events")
        self._token = token = (self._token + 1) % (1 << 64)
        yield Call("evd_post_se", calls.EvdPostSe(handle, token))
        self._pointers[token] = pointer  # before any look at the ring can find the event

    def evd_resize(self, handle: int, qlen: int) -> Op:
        """dat_evd_resize: the EVD holds ``qlen`` events from now on (DAT_INVALID_STATE while
        more are queued). A ring too small for them was replaced by the daemon: the queue is
        mapped again (its entries and indices carried over)."""
        evd = self.evd(handle)
        if not is_int(qlen) or qlen <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad evd_min_qlen {qlen!r}")
        (entries,) = yield Call("evd_resize", calls.EvdResize(handle, qlen))
        if evd.ring is not None and entries != evd.ring.entries:
            evd.ring = None
            self.mapper.unmap(eq_segment(self.name, handle))
            self._map_queue(evd, entries)
        evd.qlen = qlen

    def evd_modify_cno(self, handle: int, cno: int) -> None:
        """dat_evd_modify_cno: the EVD wakes ``cno``'s waiter from now on (0: no CNO)."""
        evd = self.evd(handle)
        if cno:
            self.cno_check(cno)
        if evd.cno:
            self.cnos[evd.cno].discard(handle)
        evd.cno = cno
        if cno:
            self.cnos[cno].add(handle)

    def evd_query(self, handle: int) -> dict[str, Any]:
        """dat_evd_query's DAT_EVD_PARAM (the API adds the IA): length, state, CNO, flags."""
        evd = self.evd(handle)
        state = EvdStateFlags.ENABLED if evd.enabled else EvdStateFlags.DISABLED
        state |= EvdStateFlags.WAITABLE if evd.waitable else EvdStateFlags.UNWAITABLE
        return {"evd_qlen": evd.qlen, "evd_state": state, "cno": evd.cno, "evd_flags": evd.flags}

    def evd_enable(self, handle: int, enabled: bool) -> None:
        """dat_evd_enable (``enabled``) / dat_evd_disable: a disabled EVD still queues events,
        but they wake no waiter of its CNO."""
        self.evd(handle).enabled = enabled

    def evd_waitable(self, handle: int, waitable: bool) -> None:
        """dat_evd_clear_unwaitable (``waitable``) / dat_evd_set_unwaitable: an unwaitable
        EVD refuses dat_evd_wait (a waiter already there returns DAT_INVALID_STATE)."""
        self.evd(handle).waitable = waitable

    def cno_create(self, agent: Any = None) -> int:
        """dat_cno_create: a waiter shared by the EVDs attached to it (``agent``: its
        DAT_OS_WAIT_PROXY_AGENT, kept for dat_cno_query)."""
        handle = self.new_handle()
        self.cnos[handle] = set()
        self.agents[handle] = agent
        return handle

    def cno_query(self, handle: int) -> dict[str, Any]:
        """dat_cno_query's DAT_CNO_PARAM (the API adds the IA): the proxy agent."""
        self.cno_check(handle)
        return {"proxy_type": ProxyType.AGENT, "agent": self.agents.get(handle)}

    def cno_modify_agent(self, handle: int, agent: Any) -> None:
        """dat_cno_modify_agent."""
        self.cno_check(handle)
        self.agents[handle] = agent

    def cno_check(self, handle: Any) -> int:
        """A CNO of this IA, or DAT_INVALID_HANDLE."""
        if type(handle) is not int or handle not in self.cnos:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_CNO, f"no CNO {handle!r}")
        return handle

    def cno_ready(self, handle: int) -> int:
        """The first attached EVD holding an event (0 if none); DAT_INVALID_HANDLE if no CNO."""
        self.cno_check(handle)
        for evd in sorted(self.cnos[handle]):
            state = self.evds[evd]
            self.refill(state)
            if state.notifying and state.enabled:
                return evd
        return 0

    def cno_free(self, handle: int) -> None:
        """dat_cno_free: refused while an EVD is attached."""
        self.cno_check(handle)
        if self.cnos[handle]:
            raise DatInvalidState(Sub.INVALID_STATE_CNO_IN_USE, "EVDs are attached")
        del self.cnos[handle]
        self.agents.pop(handle, None)

    def evd(self, handle: Any) -> EvdState:
        """An EVD by handle, or DAT_INVALID_HANDLE."""
        evd = self.evds.get(handle) if type(handle) is int else None
        if evd is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_REQUEST, f"no EVD {handle!r}")
        return evd

    def evd_free(self, handle: int) -> Op:
        """dat_evd_free: refused while an endpoint uses it or a thread waits on it."""
        state = self.evd(handle)
        if handle == ASYNC_EVD:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_IN_USE, "the IA's async EVD")
        if state.waiting:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_IN_USE, "a thread waits on it")
        for ep in self.eps.values():
            if handle in (ep.recv_evd, ep.request_evd, ep.connect_evd):
                raise DatInvalidState(Sub.INVALID_STATE_EVD_IN_USE, f"EP {ep.handle} uses it")
        yield Call("evd_free", calls.EvdHandle(handle))
        evd = self.evds.pop(handle)
        if evd.cno:
            self.cnos[evd.cno].discard(handle)
        if evd.ring is not None:
            evd.ring = None
            self.mapper.unmap(eq_segment(self.name, handle))

    def evd_dequeue(self, handle: int) -> Event:
        """dat_evd_dequeue: the oldest event, or DAT_QUEUE_EMPTY. (Once per completion a
        polling program reaps: the lookup and ``take`` are written out here, two calls fewer.)"""
        evd = (type(handle) is int and self.evds.get(handle)) or self.evd(handle)
        if evd.waiting:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_WAITER, "a waiter owns the EVD")
        if not evd.queue:
            self.refill(evd)
            if not evd.queue:
                raise DatQueueEmpty(message="no event queued")
        return self.reaped(evd.pop()) if self.srqs else evd.pop()

    def take(self, evd: EvdState) -> Event:
        """Hand out the EVD's oldest event (a receive of an SRQ stops occupying it)."""
        return self.reaped(evd.pop()) if self.srqs else evd.pop()
