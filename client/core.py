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

from client.cmcalls import ConnectionCalls, SpInfo
from client.cmcalls import parse_address as parse_address
from client.eventing import EventPath
from client.memcalls import MemoryCalls
from client.posting import Posting
from client.records import Call as Call
from client.records import CrInfo as CrInfo
from client.records import EpMirror, EvdState, QueueMapper
from client.records import Event as Event
from client.records import LmrInfo as LmrInfo
from client.records import Op as Op
from client.srqs import SrqCalls, SrqMirror
from proto import calls
from proto.attrs import EpAttr, provider_attributes
from proto.calls import METHODS
from proto.checks import Region
from proto.codec import Frame, FrameReader, encode
from proto.constants import (
    DatReturnSubtype,
    EpState,
    EvdFlags,
    EventNumber,
    HandleType,
)
from proto.errors import (
    DatError,
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatProviderNotFound,
    MalformedFrame,
    UnexpectedFrame,
    error_from_code,
)
from proto.frames import FrameType
from proto.hostif import ASYNC_EVD
from proto.schema import parse
from proto.workq import wq_segment

Sub = DatReturnSubtype
Triplet = Sequence[int]

_DTO_COMPLETION: Final = EventNumber.DTO_COMPLETION_EVENT
CONTEXT_SWEEP: Final = 256  # consumer contexts kept before those of freed handles are dropped


class ClientCore(EventPath, MemoryCalls, ConnectionCalls, SrqCalls):
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
        self.srqs: dict[int, SrqMirror] = {}
        self.lmrs: dict[int, LmrInfo] = {}
        self.regions: dict[int, Region] = {}  # lmr_context -> region
        self.crs: dict[int, CrInfo] = {}
        self.cnos: dict[int, set[int]] = {}  # CNO -> its EVDs
        self.agents: dict[int, Any] = {}  # CNO -> its DAT_OS_WAIT_PROXY_AGENT
        self.pzs: set[int] = set()
        self.rmrs: dict[int, bool] = {}  # RMR -> created for an EP (DAT_RMR_SCOPE_EP)
        self.sps: dict[int, SpInfo] = {}  # PSPs and RSPs
        self.contexts: dict[tuple[HandleType, int], Any] = {}  # dat_set_consumer_context
        self._sweep_at = CONTEXT_SWEEP
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
        self.plain = posting.plain
        self.doorbell = posting.doorbell
        self.post_extended = posting.post_extended
        self._kick_eps = posting.kick
        self.check_request = posting.check_request

    def kick(self) -> bytes:
        """Doorbells a race of the two sides' stores may have skipped (Posting.kick), for the
        EPs and the SRQs: a driver sends these before it blocks or finds an EVD empty."""
        return self._kick_eps() + self.srq_kick() if self.srqs else self._kick_eps()

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

    def ep_mirror(self, handle: Any) -> EpMirror:
        """An endpoint by handle, or DAT_INVALID_HANDLE."""
        ep = self.eps.get(handle) if type(handle) is int else None
        if ep is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EP, f"no endpoint {handle!r}")
        return ep

    # -- operations that ask the daemon (generators) -------------------------------------------

    def ia_query(self, name: str = "datfabric") -> Op:
        """dat_ia_query: the IA attributes the daemon reports, and the provider attributes
        (proto.attrs.provider_attributes; ``name``: the IA's, as dat_ia_open took it) under the
        names of DAT_PROVIDER_ATTR."""
        (attrs,) = yield Call("ia_query")
        return {**provider_attributes(attrs, name), **attrs}

    def alive(self, kind: HandleType, handle: int) -> bool:
        """Is ``handle`` a live object of ``kind`` of this IA (the IA itself: handle 0)?"""
        tables: dict[HandleType, Any] = {
            HandleType.EVD: self.evds,
            HandleType.EP: self.eps,
            HandleType.LMR: self.lmrs,
            HandleType.CNO: self.cnos,
            HandleType.CR: self.crs,
            HandleType.PZ: self.pzs,
            HandleType.RMR: self.rmrs,
            HandleType.SRQ: self.srqs,
        }
        if kind == HandleType.IA:
            return True  # the API refuses a closed IA itself
        if kind in (HandleType.PSP, HandleType.RSP):
            info = self.sps.get(handle)
            return info is not None and (info.ep != 0) == (kind == HandleType.RSP)
        table = tables.get(kind)
        return table is not None and handle in table

    def set_context(self, kind: HandleType, handle: int, context: Any) -> None:
        """dat_set_consumer_context of a live handle (DAT_INVALID_HANDLE otherwise)."""
        self._live(kind, handle)
        if len(self.contexts) >= self._sweep_at:  # handles are never reused: only memory
            self.contexts = {key: v for key, v in self.contexts.items() if self.alive(*key)}
            self._sweep_at = max(CONTEXT_SWEEP, 2 * len(self.contexts))
        self.contexts[kind, handle] = context

    def get_context(self, kind: HandleType, handle: int) -> Any:
        """dat_get_consumer_context: what was set (None if nothing was)."""
        self._live(kind, handle)
        return self.contexts.get((kind, handle))

    def _live(self, kind: HandleType, handle: int) -> None:
        if not self.alive(kind, handle):
            raise DatInvalidHandle(Sub.NO_SUBTYPE, f"no {kind.name} {handle!r}")

    def admin(self, method: str, args: list[Any]) -> Op:
        """A daemon administration call (fault rules, node status): its result record."""
        spec = METHODS.get(method)
        if spec is None or not spec.admin:
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"{method!r} is no admin call")
        result = yield Call(method, parse(spec.args, args, method))
        return result

    def ep_create(
        self, pz: int, recv_evd: int, request_evd: int, connect_evd: int, attr: EpAttr | None
    ) -> Op:
        """dat_ep_create: an RC endpoint in UNCONNECTED."""
        self.check_evds(recv_evd, request_evd, connect_evd)
        wire = (attr or EpAttr()).to_wire()
        args = calls.EpCreate(pz, recv_evd, request_evd, connect_evd, wire)
        handle, granted = yield Call("ep_create", args)
        mirror = self.eps[handle] = EpMirror(
            handle, pz, recv_evd, request_evd, connect_evd, EpAttr.from_wire(granted)
        )
        self.queues(mirror)  # from now on the daemon's STATE word is the EP's state
        return handle

    def check_evds(self, recv_evd: int, request_evd: int, connect_evd: int) -> None:
        """The EVDs an EP names are the IA's (0: none), or DAT_INVALID_HANDLE of their kind."""
        for evd, sub in (
            (recv_evd, Sub.INVALID_HANDLE_EVD_RECV),
            (request_evd, Sub.INVALID_HANDLE_EVD_REQUEST),
            (connect_evd, Sub.INVALID_HANDLE_EVD_CONN),
        ):
            if evd and evd not in self.evds:
                raise DatInvalidHandle(sub, f"no EVD {evd!r}")

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
        ep.fast = None

    def ep_free(self, handle: int) -> Op:
        """dat_ep_free."""
        yield Call("ep_free", calls.EpHandle(handle))
        self._forget(handle)

    def _forget(self, handle: int) -> None:
        """An EP is gone: drop its mirror and unmap its queues."""
        mirror = self.eps.pop(handle, None)
        if mirror is not None and mirror.sq is not None:
            mirror.sq = mirror.rq = mirror.fast = None
            self.mapper.unmap(wq_segment(self.name, handle))
