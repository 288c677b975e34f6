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
from proto import calls, ep_states
from proto.attrs import EpAttr
from proto.calls import METHODS
from proto.checks import Region, is_int
from proto.codec import Frame, FrameReader, encode
from proto.constants import (
    TIMEOUT_INFINITE,
    CloseFlags,
    DatReturnSubtype,
    EpState,
    EvdFlags,
    EventNumber,
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
from proto.hostif import (
    ASYNC_EVD,
    wq_segment,
)
from proto.limits import MAX_PRIVATE_DATA
from proto.schema import parse

Sub = DatReturnSubtype
Triplet = Sequence[int]

_DTO_COMPLETION: Final = EventNumber.DTO_COMPLETION_EVENT


class ClientCore(EventPath, MemoryCalls, SrqCalls):
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
