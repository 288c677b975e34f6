"""The consumer library's sans-IO core: DAT objects, local checks, event routing.

Operations that need the daemon are generators: they yield one ``Call`` and receive its result,
so the blocking API (client.api) and the asyncio API (client.aio) drive the same code. Posts need
no reply: they are checked here against local mirrors of the endpoints and LMRs (giving the
spec's synchronous return codes) and are written into the EP's send or receive queue in shared
memory (docs/host-interface.md), with a doorbell frame only when the daemon may not look; their
outcome comes back as entries of the EVDs' event queues, also in shared memory, read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from client.posting import Posting
from client.records import Call as Call
from client.records import CrInfo as CrInfo
from client.records import EpMirror, EvdState, QueueMapper
from client.records import Event as Event
from client.records import LmrInfo as LmrInfo
from client.records import Op as Op
from proto import calls, ep_states, events
from proto.attrs import EpAttr
from proto.calls import METHODS
from proto.checks import Region, is_int, parse_triplet
from proto.codec import Frame, FrameReader, encode
from proto.constants import (
    LMR_COOKIE_SIZE,
    TIMEOUT_INFINITE,
    CloseFlags,
    DatReturnSubtype,
    Dtos,
    EpState,
    EvdFlags,
    EventNumber,
    MemPriv,
    MemType,
)
from proto.errors import (
    DatError,
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatProviderNotFound,
    DatQueueEmpty,
    DatTimeoutExpired,
    MalformedFrame,
    UnexpectedFrame,
    error_from_code,
)
from proto.events import decode_event
from proto.frames import FrameType
from proto.hostif import (
    ASYNC_EVD,
    EQ_ENTRY_SIZE,
    NOTIFIES,
    RingKind,
    check_descriptor,
    eq_ring,
    eq_segment,
    read_eqe,
    wq_segment,
)
from proto.limits import MAX_PRIVATE_DATA
from proto.schema import parse

Sub = DatReturnSubtype
Triplet = Sequence[int]

_DTO_COMPLETION: Final = EventNumber.DTO_COMPLETION_EVENT


class ClientCore:
    """State of one open IA, without I/O."""

    def __init__(self, name: str, mapper: QueueMapper, async_evd_qlen: int = 8) -> None:
        self.name = name  # the IA's name in its HELLO (its queue segments are named after it)
        self.mapper = mapper
        self.reader = FrameReader()
        self._req = 0
        self._handles = ASYNC_EVD
        self.replies: dict[int, Frame] = {}
        self.evds: dict[int, EvdState] = {
            ASYNC_EVD: EvdState(ASYNC_EVD, max(async_evd_qlen, 1), EvdFlags.ASYNC)
        }
        self.eps: dict[int, EpMirror] = {}
        self.lmrs: dict[int, LmrInfo] = {}
        self.regions: dict[int, Region] = {}  # lmr_context -> region
        self.crs: dict[int, CrInfo] = {}
        self.cnos: dict[int, set[int]] = {}  # CNO -> its EVDs
        self.lmr_sync_req: bool | None = None  # the provider attribute, once asked
        self.catastrophic = False
        self.lost_reason = ""
        self.ready = False  # the daemon's HELLO arrived
        self._pending: dict[int, str] = {}  # req_id -> method, until its reply is taken
        self._pointers: dict[int, Any] = {}  # dat_evd_post_se's pointers by the token sent
        self._token = 0
        posting = Posting(name, mapper, self.eps, self.regions, self.ep_mirror)
        self.queues = posting.queues
        self.post = posting.post  # the hot path: no delegating call in between
        self.kick = posting.kick
        self.check_request = posting.check_request

    # -- frames in and out ---------------------------------------------------------------------

    def call_frame(self, call: Call) -> tuple[int, bytes]:
        """Encode a call; returns its request id and bytes."""
        self._req += 1
        self._pending[self._req] = call.method
        return self._req, encode(FrameType.CALL, self._req, call.method, list(call.args))

    def feed(self, data: bytes | memoryview) -> None:
        """Take bytes from the daemon: replies are kept, events are queued on their EVDs."""
        self.reader.feed(data)
        self.drain()

    def drain(self) -> None:
        """Process every complete frame in the reader."""
        while (frame := self.reader.next_event()) is not None:
            if frame.type == FrameType.REPLY:
                self._reply(frame)
            elif frame.type == FrameType.NOTIFY:
                pass  # it woke the driver; the events are in the rings
            elif frame.type == FrameType.ERROR:
                self.lost(f"daemon reported: {frame.fields[0]}")
            elif frame.type == FrameType.HELLO:
                self.ready = True
            else:
                raise UnexpectedFrame(f"{frame.type.name} from the daemon")

    def _reply(self, frame: Frame) -> None:
        """Keep a reply; one that moved an endpoint updates its state here, in stream order,
        so an event that follows it in the stream (ESTABLISHED, ...) wins."""
        req_id, code, _, result = frame.fields
        method = self._pending.get(req_id) if type(req_id) is int else None
        if method is None or type(code) is not int or not isinstance(result, list):
            raise MalformedFrame(f"a reply to no call: {frame.fields!r}")
        self.replies[req_id] = frame
        if code == 0 and METHODS[method].moves_ep and len(result) >= 2 and result[-2] in self.eps:
            self.eps[result[-2]].state = EpState(result[-1])

    def take_reply(self, req_id: int) -> tuple[object, ...] | None:
        """The result record of call ``req_id`` if it has arrived (raising its DatError if it
        failed)."""
        frame = self.replies.pop(req_id, None)
        if frame is None:
            return None
        method = self._pending.pop(req_id)
        _, code, message, result = frame.fields
        if code:
            raise error_from_code(code, str(message))
        try:
            return parse(METHODS[method].result, result, f"the reply to {method}")
        except DatError as err:
            raise MalformedFrame(str(err)) from None

    def lost(self, reason: str) -> None:
        """The daemon is gone: IA_CATASTROPHIC on the async EVD (once), after what the rings
        already hold."""
        if not self.catastrophic:
            self.lost_reason = reason
            for evd in self.evds.values():
                self.refill(evd)
            self.catastrophic = True
            async_evd = self.evds[ASYNC_EVD]
            if len(async_evd.queue) < async_evd.qlen:
                async_evd.push(Event(EventNumber.ASYNC_ERROR_IA_CATASTROPHIC, ASYNC_EVD))

    def open_failure(self, where: str) -> DatError:
        """What dat_ia_open returns when the daemon at ``where`` did not say HELLO: the daemon's
        refusal of one IA too many, or no provider there."""
        if "DAT_INSUFFICIENT_RESOURCES" in self.lost_reason:
            return DatInsufficientResources(DatReturnSubtype.RESOURCE_DEVICE, self.lost_reason)
        return DatProviderNotFound(DatReturnSubtype.NAME_NOT_REGISTERED, f"{where}: no HELLO")

    # -- events --------------------------------------------------------------------------------

    def refill(self, evd: EvdState) -> None:
        """Read the entries the daemon added to ``evd``'s queue since the last look (they keep
        their slots until handed out)."""
        ring = evd.ring
        if ring is None or self.catastrophic:
            return
        ready = ring.available()
        while evd.from_ring < ready:
            raw, flags, head, body = read_eqe(ring, ring.mine + evd.from_ring)
            if raw == _DTO_COMPLETION:  # the common entry, made into its Event directly
                ep, status, cookie, length, op = head  # proto.events.dto_entry's layout
                notify = bool(flags & NOTIFIES)
                event = Event(
                    _DTO_COMPLETION, evd.handle, ep, cookie, status, length, op, notify=notify
                )
            else:
                event = self._event(*decode_event(evd.handle, raw, flags, head, body))
            evd.from_ring += 1
            evd.queue.append(event)
            evd.notifying += event.notify

    def _event(self, number: EventNumber, ev: events.Event) -> Event:
        """One event of the daemon as the API hands it out, updating the mirrors it concerns."""
        if isinstance(ev, events.DtoCompletion):
            return Event(
                number, ev.evd, ev.ep, ev.cookie, ev.status, ev.length, ev.op, notify=ev.notify
            )
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
        if cno and cno not in self.cnos:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_CNO, f"no CNO {cno!r}")
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

    def cno_create(self) -> int:
        """dat_cno_create: a waiter shared by the EVDs attached to it."""
        handle = self.new_handle()
        self.cnos[handle] = set()
        return handle

    def cno_ready(self, handle: int) -> int:
        """The first attached EVD holding an event (0 if none); DAT_INVALID_HANDLE if no CNO."""
        if handle not in self.cnos:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_CNO, f"no CNO {handle!r}")
        for evd in sorted(self.cnos[handle]):
            self.refill(self.evds[evd])
            if self.evds[evd].notifying:
                return evd
        return 0

    def cno_free(self, handle: int) -> None:
        """dat_cno_free: refused while an EVD is attached."""
        if handle not in self.cnos:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_CNO, f"no CNO {handle!r}")
        if self.cnos[handle]:
            raise DatInvalidState(Sub.INVALID_STATE_CNO_IN_USE, "EVDs are attached")
        del self.cnos[handle]

    def evd(self, handle: Any) -> EvdState:
        """An EVD by handle, or DAT_INVALID_HANDLE."""
        evd = self.evds.get(handle) if type(handle) is int else None
        if evd is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_REQUEST, f"no EVD {handle!r}")
        return evd

    def evd_free(self, handle: int) -> Op:
        """dat_evd_free: refused while an endpoint uses it."""
        self.evd(handle)
        if handle == ASYNC_EVD:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_IN_USE, "the IA's async EVD")
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
        """dat_evd_dequeue: the oldest event, or DAT_QUEUE_EMPTY."""
        evd = self.evd(handle)
        if evd.waiting:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_WAITER, "a waiter owns the EVD")
        if not evd.queue:
            self.refill(evd)
            if not evd.queue:
                raise DatQueueEmpty(message="no event queued")
        return evd.pop()

    def ep_mirror(self, handle: Any) -> EpMirror:
        """An endpoint by handle, or DAT_INVALID_HANDLE."""
        ep = self.eps.get(handle) if type(handle) is int else None
        if ep is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EP, f"no endpoint {handle!r}")
        return ep

    # -- operations that ask the daemon (generators) -------------------------------------------

    def ia_query(self) -> Op:
        """dat_ia_query: IA and provider attributes."""
        (attrs,) = yield Call("ia_query")
        return dict(attrs)

    def admin(self, method: str, args: list[Any]) -> Op:
        """A daemon administration call (fault rules, node status): its result record."""
        spec = METHODS.get(method)
        if spec is None or not spec.admin:
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"{method!r} is no admin call")
        result = yield Call(method, parse(spec.args, args, method))
        return result

    def pz_create(self) -> Op:
        """dat_pz_create."""
        (pz,) = yield Call("pz_create")
        return pz

    def pz_free(self, pz: int) -> Op:
        """dat_pz_free."""
        yield Call("pz_free", calls.PzFree(pz))

    def lmr_create(
        self,
        mem_type: int,
        region: Any,
        length: int,
        pz: int,
        privileges: int,
        locate: Any,
    ) -> Op:
        """dat_lmr_create; ``locate(address, length)`` names the shm segment of VIRTUAL memory."""
        args = calls.LmrCreate(int(mem_type), "", 0, 0, None, 0, length, pz, privileges)
        if mem_type in (MemType.VIRTUAL, MemType.SHARED_VIRTUAL):
            cookie = None
            if mem_type == MemType.SHARED_VIRTUAL:
                if not isinstance(region, (tuple, list)) or len(region) != 2:
                    raise DatInvalidParameter(Sub.INVALID_ARG3, "region must be (cookie, address)")
                cookie, region = bytes(region[0]), region[1]
            if not is_int(region):
                raise DatInvalidParameter(Sub.INVALID_ARG3, "region must be a virtual address")
            if not is_int(length):
                raise DatInvalidParameter(Sub.INVALID_ARG4, "length must be a DAT_VLEN")
            if locate(region, 1) is None:
                raise DatInvalidParameter(
                    Sub.INVALID_ARG3, "memory must come from the IA's allocator (ia.alloc)"
                )
            where = locate(region, max(length, 1))
            if where is None:
                raise DatInvalidParameter(Sub.INVALID_ARG4, "the length runs past the buffer")
            args = args._replace(segment=where[0], offset=where[1], address=region, cookie=cookie)
        elif is_int(region):
            args = args._replace(parent=region)
        handle, lmr_ctx, rmr_ctx, size, address = yield Call("lmr_create", args)
        info = LmrInfo(handle, lmr_ctx, rmr_ctx, size, address, pz, MemPriv(privileges))
        self.lmrs[handle] = info
        self.regions[lmr_ctx] = Region(address, size, pz, MemPriv(privileges))
        return info

    def shared_attach(self, cookie: bytes, size: int) -> Op:
        """Create or join the node's shared region of a 40-byte cookie: (segment, length)."""
        if len(cookie) != LMR_COOKIE_SIZE:
            raise DatInvalidParameter(Sub.INVALID_ARG1, "a DAT_LMR_COOKIE is 40 bytes")
        name, length = yield Call("shared_attach", calls.SharedAttach(bytes(cookie), size))
        return name, length

    def lmr_sync(self, to_cpu: bool, segments: Sequence[Triplet]) -> Op:
        """dat_lmr_sync_rdma_write (``to_cpu``) / _read: checked here, done by the daemon only
        when the provider attribute lmr_sync_req says memory is not coherent."""
        if not isinstance(segments, (list, tuple)):
            raise DatInvalidParameter(Sub.INVALID_ARG2, "local_segments must be a list")
        for triplet in segments:
            address, length, context = parse_triplet(triplet, Sub.INVALID_ARG2)
            region = self.regions.get(context)
            if length and region is None:
                raise DatInvalidParameter(Sub.INVALID_ARG2, f"no LMR with context {context:#x}")
            if length and region is not None and not region.contains(address, length):
                raise DatInvalidParameter(
                    Sub.INVALID_ARG2, f"{address:#x}+{length} is outside its LMR"
                )
        if self.lmr_sync_req is None:
            (attrs,) = yield Call("ia_query")
            self.lmr_sync_req = bool(attrs["lmr_sync_req"])
        if self.lmr_sync_req:
            yield Call("lmr_sync", calls.LmrSync(bool(to_cpu), _wire_iov(segments)))

    def lmr_free(self, handle: int) -> Op:
        """dat_lmr_free."""
        yield Call("lmr_free", calls.LmrFree(handle))
        info = self.lmrs.pop(handle, None)
        if info is not None:
            self.regions.pop(info.lmr_context, None)

    def rmr_create(self, pz: int) -> Op:
        """dat_rmr_create: an unbound memory window in ``pz``."""
        (rmr,) = yield Call("rmr_create", calls.RmrCreate(pz))
        return rmr

    def rmr_free(self, rmr: int) -> Op:
        """dat_rmr_free."""
        yield Call("rmr_free", calls.RmrFree(rmr))

    def rmr_bind(
        self,
        rmr: int,
        lmr: int,
        triplet: Triplet,
        privileges: int,
        ep: int,
        cookie: int,
        flags: int,
    ) -> Op:
        """dat_rmr_bind: the new rmr_context now; RMR_BIND_COMPLETION on the request EVD."""
        if not is_int(cookie) or not 0 <= cookie < 1 << 64:
            raise DatInvalidParameter(Sub.INVALID_ARG7, "user_cookie must be a u64")
        mirror = self.ep_mirror(ep)
        self.check_request(mirror, int(flags), Sub.INVALID_ARG8, "an RMR bind")
        wire = list(parse_triplet(triplet, Sub.INVALID_ARG3))
        args = calls.RmrBind(rmr, lmr, wire, int(privileges), ep, cookie, int(flags))
        (context,) = yield Call("rmr_bind", args)
        mirror.binds += 1
        return context

    def ep_create(
        self, pz: int, recv_evd: int, request_evd: int, connect_evd: int, attr: EpAttr | None
    ) -> Op:
        """dat_ep_create: an RC endpoint in UNCONNECTED."""
        for evd, sub in (
            (recv_evd, Sub.INVALID_HANDLE_EVD_RECV),
            (request_evd, Sub.INVALID_HANDLE_EVD_REQUEST),
            (connect_evd, Sub.INVALID_HANDLE_EVD_CONN),
        ):
            if evd and evd not in self.evds:
                raise DatInvalidHandle(sub, f"no EVD {evd!r}")
        wire = (attr or EpAttr()).to_wire()
        args = calls.EpCreate(pz, recv_evd, request_evd, connect_evd, wire)
        handle, granted = yield Call("ep_create", args)
        mirror = self.eps[handle] = EpMirror(
            handle, pz, recv_evd, request_evd, connect_evd, EpAttr.from_wire(granted)
        )
        self.queues(mirror)  # from now on the daemon's STATE word is the EP's state
        return handle

    def ep_modify(self, handle: int, changes: dict[str, Any]) -> Op:
        """dat_ep_modify: PZ, EVDs or attributes, before the connection is made."""
        ep = self.ep_mirror(handle)
        for name in ("recv_evd", "request_evd", "connect_evd"):
            if changes.get(name) and changes[name] not in self.evds:
                raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_CONN, f"no EVD {changes[name]!r}")
        wire = dict(changes)
        if isinstance(wire.get("attr"), EpAttr):
            wire["attr"] = wire["attr"].to_wire()
        granted, _, _ = yield Call("ep_modify", calls.EpModify(handle, wire))
        ep.pz = changes.get("pz", ep.pz)
        ep.recv_evd = changes.get("recv_evd", ep.recv_evd)
        ep.request_evd = changes.get("request_evd", ep.request_evd)
        ep.connect_evd = changes.get("connect_evd", ep.connect_evd)
        ep.attr = EpAttr.from_wire(granted)

    def ep_free(self, handle: int) -> Op:
        """dat_ep_free."""
        yield Call("ep_free", calls.EpHandle(handle))
        self._forget(handle)

    def _forget(self, handle: int) -> None:
        """An EP is gone: drop its mirror and unmap its queues."""
        mirror = self.eps.pop(handle, None)
        if mirror is not None and mirror.sq is not None:
            mirror.sq = mirror.rq = None
            self.mapper.unmap(wq_segment(self.name, handle))

    def ep_connect(
        self,
        handle: int,
        remote_addr: Any,
        conn_qual: int,
        timeout: int,
        private_data: bytes,
    ) -> Op:
        """dat_ep_connect: the outcome arrives on the connect EVD."""
        ep = self.ep_mirror(handle)
        host, port = parse_address(remote_addr)
        if not is_int(timeout) or timeout <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "timeout must be positive")
        if len(private_data) > MAX_PRIVATE_DATA:
            raise DatInvalidParameter(Sub.INVALID_ARG6, "private data too long")
        if ep.state != EpState.UNCONNECTED:
            raise ep_states.state_error(ep.state, "dat_ep_connect")
        timeout = min(timeout, TIMEOUT_INFINITE)
        args = calls.EpConnect(handle, host, port, conn_qual, timeout, bytes(private_data))
        yield Call("ep_connect", args)

    def ep_disconnect(self, handle: int, flags: int) -> Op:
        """dat_ep_disconnect."""
        ep = self.ep_mirror(handle)
        if flags not in (CloseFlags.ABRUPT, CloseFlags.GRACEFUL):
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad close flags {flags!r}")
        if ep.state in (
            EpState.UNCONNECTED,
            EpState.RESERVED,
            EpState.PASSIVE_CONNECTION_PENDING,
            EpState.TENTATIVE_CONNECTION_PENDING,
        ):
            raise ep_states.state_error(ep.state, "dat_ep_disconnect")
        yield Call("ep_disconnect", calls.EpDisconnect(handle, int(flags)))

    def ep_reset(self, handle: int) -> Op:
        """dat_ep_reset: back to UNCONNECTED so the EP can connect again."""
        self.ep_mirror(handle)
        yield Call("ep_reset", calls.EpHandle(handle))

    def psp_create(self, conn_qual: int, evd: int, flags: int) -> Op:
        """dat_psp_create."""
        backlog = self.evd(evd).qlen  # the EVD's length is the backlog
        (psp,) = yield Call("psp_create", calls.PspCreate(conn_qual, evd, int(flags), backlog))
        return psp

    def psp_free(self, psp: int) -> Op:
        """dat_psp_free."""
        yield Call("psp_free", calls.PspFree(psp))

    def rsp_create(self, conn_qual: int, ep: int, evd: int) -> Op:
        """dat_rsp_create: the EP becomes RESERVED."""
        self.ep_mirror(ep)
        self.evd(evd)
        rsp, _, _ = yield Call("rsp_create", calls.RspCreate(conn_qual, ep, evd))
        return rsp

    def rsp_free(self, rsp: int) -> Op:
        """dat_rsp_free."""
        yield Call("rsp_free", calls.RspFree(rsp))

    def cr_accept(self, cr: int, ep: int | None, private_data: bytes) -> Op:
        """dat_cr_accept: ESTABLISHED (or ACCEPT_COMPLETION_ERROR) follows on the connect EVD."""
        info = self.crs.get(cr)
        if info is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_CR, f"no connection request {cr!r}")
        if len(private_data) > MAX_PRIVATE_DATA:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "private data too long")
        yield Call("cr_accept", calls.CrAccept(cr, ep or 0, bytes(private_data)))
        self.crs.pop(cr, None)

    def cr_reject(self, cr: int, private_data: bytes) -> Op:
        """dat_cr_reject (2.0: with private data for the active side's PEER_REJECTED)."""
        info = self.crs.get(cr)
        if info is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_CR, f"no connection request {cr!r}")
        yield Call("cr_reject", calls.CrReject(cr, bytes(private_data)))
        self.crs.pop(cr, None)
        mirror = self.eps.get(info.ep)
        if mirror is not None and mirror.state == EpState.TENTATIVE_CONNECTION_PENDING:
            self._forget(info.ep)  # the provider freed the EP it had made

    # -- posts (no reply) ----------------------------------------------------------------------


def _wire_iov(local_iov: Sequence[Triplet]) -> list[list[int]]:
    return [[int(a), int(n), int(c)] for a, n, c in local_iov]


def parse_address(addr: Any) -> tuple[str, int]:
    """An IA address: ``(host, port)`` or ``"host:port"`` (DAT_IA_ADDRESS_PTR)."""
    if isinstance(addr, str):
        host, _, port = addr.rpartition(":")
        if host and port.isdigit():
            return host, int(port)
    elif isinstance(addr, tuple) and len(addr) == 2:
        host, port = addr
        if isinstance(host, str) and type(port) is int and 0 < port < 65536:
            return host, port
    raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad remote address {addr!r}")
