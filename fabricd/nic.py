"""The simulated NIC: the daemon's pure core.

It owns the consumers' objects (PZ, LMR, EP, PSP, RSP, CR), runs connection management and the
reliable-connection data path, and routes completions to the consumers' EVDs. It does no I/O: the
asyncio shell hands it frames and channels, and it acts through the injected ``Shell`` (timers,
outgoing connections) and ``Channel`` objects (send a header plus payload views, close).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from fabricd.faults import FaultEngine, Message, chance
from fabricd.memory import Lmr, MemoryRegistry, SegmentMapper, Window
from proto import ep_states
from proto.attrs import MAX_PRIVATE_DATA, EpAttr, ia_attributes
from proto.checks import Region, check_local_iov, parse_triplet
from proto.codec import DISCARD, Frame, Sink, decode_header, encode, hello
from proto.constants import (
    LMR_COOKIE_SIZE,
    CloseFlags,
    CompletionFlags,
    DatReturnSubtype,
    Dtos,
    MemPriv,
    MemType,
    PspFlags,
)
from proto.constants import DtoCompletionStatus as St
from proto.constants import EpState as S
from proto.constants import EventNumber as E
from proto.ep_states import EpInput
from proto.errors import (
    DatConnQualInUse,
    DatError,
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatLengthError,
    DatModelNotSupported,
    DatPrivilegesViolation,
    DatProtectionViolation,
    MalformedFrame,
    UnexpectedFrame,
    VersionMismatch,
)
from proto.faultrules import RETRY_COUNT, Rule
from proto.frames import (
    PROTOCOL_VERSION,
    ROLE_CONSUMER,
    ROLE_PEER,
    FrameType,
)
from proto.segments import SHARED_PREFIX as SHARED_SEGMENT_PREFIX
from proto.segments import shared_segment_name

log = logging.getLogger("fabricd")
Sub = DatReturnSubtype


class Channel(Protocol):
    """One stream as the core sees it (a consumer's unix socket or a peer's TCP stream)."""

    def send(self, header: bytes, payload: Sequence[memoryview] = ()) -> None: ...

    def close(self, reason: str) -> None: ...

    @property
    def peer_address(self) -> str: ...


class Timer(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None: ...


class Shell(Protocol):
    """The effects the core asks of its I/O shell."""

    def connect_peer(self, link: PeerLink, host: str, port: int) -> None: ...

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer: ...

    def call_soon(self, fn: Callable[[], None]) -> None: ...

    def crash(self) -> None: ...

    def now(self) -> float: ...


# -- objects -----------------------------------------------------------------------------------


@dataclass(eq=False)
class Consumer:
    """One open IA: a consumer process connected over the daemon's unix socket."""

    id: int
    channel: Channel
    name: str
    pzs: dict[int, int] = field(default_factory=dict)  # pz handle -> users
    lmrs: dict[int, Lmr] = field(default_factory=dict)
    eps: dict[int, Ep] = field(default_factory=dict)
    rmrs: dict[int, Rmr] = field(default_factory=dict)
    psps: dict[int, Listener] = field(default_factory=dict)
    crs: dict[int, Cr] = field(default_factory=dict)
    events: list[list[Any]] = field(default_factory=list)
    closed: bool = False


@dataclass(eq=False, slots=True)
class Op:
    """One posted request DTO (send, RDMA write or read) awaiting its completion."""

    kind: Dtos
    cookie: int
    flags: int
    seq: int
    length: int
    views: list[memoryview]
    done: bool = False
    remote: tuple[int, int, int] = (0, 0, 0)  # the RMR triplet of an RDMA DTO
    status: St = St.DTO_SUCCESS  # done but failed: breaks the connection when retired
    bind: Bind | None = None


@dataclass(eq=False, slots=True)
class Bind:
    """What an RMR bind will do when it executes (its new key is already promised)."""

    rmr: Rmr
    lmr: Lmr | None
    region: Region
    key: int


@dataclass(eq=False)
class Rmr:
    """A memory window (dat_rmr_create): unbound, or bound to part of an LMR."""

    handle: int
    pz: int
    context: int = 0
    lmr: Lmr | None = None
    region: Region | None = None


@dataclass(eq=False, slots=True)
class Recv:
    """One posted receive buffer."""

    cookie: int
    flags: int
    views: list[memoryview]
    capacity: int


@dataclass(eq=False)
class Ep:
    """An endpoint with its queues and connection."""

    handle: int
    consumer: Consumer
    pz: int
    recv_evd: int
    request_evd: int
    connect_evd: int
    attr: EpAttr
    state: S = S.UNCONNECTED
    link: PeerLink | None = None
    ops: deque[Op] = field(default_factory=deque)  # every outstanding request DTO
    held: deque[Op] = field(default_factory=deque)  # posted, not started yet (fence, credits)
    recvs: deque[Recv] = field(default_factory=deque)
    reads_out: int = 0  # RDMA Read requests sent and not answered
    reads_done: int = 0  # RDMA Read responses received (tells the target its load)
    next_seq: int = 1
    acked: int = 0
    timer: Timer | None = None
    rsp: Listener | None = None


@dataclass(eq=False)
class SharedRegion:
    """The node's shared memory of one DAT_LMR_COOKIE and the consumers attached to it."""

    segment: str
    length: int
    users: set[int] = field(default_factory=set)


@dataclass(eq=False)
class Listener:
    """A PSP (persistent) or RSP (reserved, one-shot) listening on a conn_qual."""

    handle: int
    consumer: Consumer
    conn_qual: int
    evd: int
    flags: int
    ep: Ep | None = None  # RSP only
    backlog: int = 1 << 30  # PSP: the CR EVD's length; requests beyond it are refused


@dataclass(eq=False)
class Cr:
    """A connection request waiting for dat_cr_accept or dat_cr_reject."""

    handle: int
    consumer: Consumer
    link: PeerLink
    listener: Listener
    private_data: bytes
    rdma_read_in: int
    rdma_read_out: int
    ep: Ep | None = None  # the EP the request carries: its RSP's, or one the provider made


@dataclass(eq=False)
class PeerLink:
    """One daemon-to-daemon TCP stream; it carries exactly one connected EP pair."""

    id: int
    active: bool
    channel: Channel | None = None
    ep: Ep | None = None
    cr: Cr | None = None
    hello: bool = False
    remote_name: str = ""
    acked: int = 0  # target side: last request sequence number executed
    reads_in: int = 0  # target side: RDMA Read requests received
    ack_due: bool = False
    fault: tuple[int, St] | None = None  # target side: a request refused while its payload drains
    stalled: deque[Frame] = field(default_factory=deque)  # frames held behind an RNR send
    unsent: list[Frame] = field(default_factory=list)  # CM frames waiting for the TCP connect
    closed: bool = False
    local: bool = False  # both ends in this daemon: no heartbeat needed
    remote_node: str = ""  # the peer daemon's node name
    messages: int = 0  # outgoing messages counted for fault decisions
    delayed: deque[tuple[float, bytes, list[memoryview]]] = field(default_factory=deque)
    busy_until: float = 0.0  # a bandwidth cap: when the link is free again
    release: Timer | None = None
    sent: bool = False  # something was sent since the last tick
    heard: bool = False  # something arrived since the last tick
    last_heard: float = 0.0


# -- the NIC -----------------------------------------------------------------------------------


class Nic:
    """The per-node simulated NIC."""

    def __init__(
        self,
        name: str,
        address: tuple[str, int],
        shell: Shell,
        mapper: SegmentMapper,
        random_u32: Callable[[], int],
        coherent: bool = True,
        heartbeat: tuple[float, float] = (1.0, 3.0),
    ) -> None:
        self.name = name
        self.address = address
        self.shell = shell
        self.memory = MemoryRegistry(mapper, random_u32, coherent)
        self.heartbeat_interval, self.heartbeat_timeout = heartbeat
        self.faults = FaultEngine()
        self.peer_names: dict[str, str] = {}  # peer address -> node name, from HELLOs
        self.pid = 0  # set by the shell, for fabricctl node pause/resume
        self.consumers: dict[int, Consumer] = {}
        self.listeners: dict[int, Listener] = {}  # conn_qual -> PSP or RSP
        self.links: dict[int, PeerLink] = {}
        self.shared: dict[bytes, SharedRegion] = {}  # by cookie: all 40 bytes are the key
        self._next = 0
        self._dirty: list[Consumer] = []
        self._calls: dict[str, Callable[[Consumer, list[Any]], list[Any]]] = {
            "ia_query": self._ia_query,
            "pz_create": self._pz_create,
            "pz_free": self._pz_free,
            "lmr_create": self._lmr_create,
            "lmr_free": self._lmr_free,
            "shared_attach": self._shared_attach,
            "lmr_sync": self._lmr_sync,
            "rmr_create": self._rmr_create,
            "rmr_bind": self._rmr_bind,
            "rmr_free": self._rmr_free,
            "fault_add": self._fault_add,
            "fault_remove": self._fault_remove,
            "fault_clear": self._fault_clear,
            "fault_list": self._fault_list,
            "fault_log": self._fault_log,
            "rmr_revoke": self._rmr_revoke,
            "node_crash": self._node_crash,
            "node_status": self._node_status,
            "ep_create": self._ep_create,
            "ep_free": self._ep_free,
            "ep_modify": self._ep_modify,
            "ep_connect": self._ep_connect,
            "ep_disconnect": self._ep_disconnect,
            "ep_reset": self._ep_reset,
            "psp_create": self._psp_create,
            "psp_free": self._listener_free,
            "rsp_create": self._rsp_create,
            "rsp_free": self._listener_free,
            "cr_accept": self._cr_accept,
            "cr_reject": self._cr_reject,
        }

    @property
    def address_text(self) -> str:
        """This node's peer address as ``host:port``."""
        return f"{self.address[0]}:{self.address[1]}"

    def _handle(self) -> int:
        self._next += 1
        return self._next

    # -- event delivery ------------------------------------------------------------------------

    def _push(self, consumer: Consumer, event: list[Any]) -> None:
        """Queue an event for a consumer; all queued events leave in one frame per loop turn."""
        if consumer.closed:
            return
        if not consumer.events:
            if not self._dirty:
                self.shell.call_soon(self.flush_events)
            self._dirty.append(consumer)
        consumer.events.append(event)

    def flush_events(self) -> None:
        """Send every consumer its queued events (coalesced completion push)."""
        dirty, self._dirty = self._dirty, []
        for consumer in dirty:
            if consumer.events and not consumer.closed:
                consumer.channel.send(encode(FrameType.EVENTS, consumer.events))
            consumer.events = []

    def _dto_event(
        self, ep: Ep, evd: int, cookie: int, status: St, length: int, op: Dtos, notify: bool = True
    ) -> None:
        """Queue a DTO completion; ``notify`` False: an UNSIGNALLED one, which wakes nobody."""
        event = [E.DTO_COMPLETION_EVENT, evd, ep.handle, cookie, status, length, op, notify]
        self._push(ep.consumer, event)

    def _conn_event(self, ep: Ep, event: E, private_data: bytes = b"") -> None:
        self._push(ep.consumer, [event, ep.connect_evd, ep.handle, private_data, ep.state])

    # -- consumers -----------------------------------------------------------------------------

    def consumer_frame(
        self, channel: Channel, consumer: Consumer | None, frame: Frame
    ) -> Consumer | None:
        """Handle one frame from a consumer; the first must be HELLO, which opens the IA."""
        if consumer is None:
            if frame.type != FrameType.HELLO:
                raise UnexpectedFrame(f"expected HELLO, got {frame.type.name}")
            self._check_hello(frame, ROLE_CONSUMER)
            consumer = Consumer(self._handle(), channel, str(frame.fields[3]))
            self.consumers[consumer.id] = consumer
            channel.send(self._hello())
            log.info("consumer %s opened IA %d", consumer.name, consumer.id)
            return consumer
        kind = frame.type
        if kind == FrameType.CALL:
            self._call(consumer, frame.fields)
        elif FrameType.POST_SEND <= kind <= FrameType.POST_READ:
            self._post(consumer, kind, frame.fields)
        else:
            raise UnexpectedFrame(f"{kind.name} is not a consumer request")
        return consumer

    def _hello(self) -> bytes:
        return hello(ROLE_PEER, f"{self.name}@{self.address_text}")

    @staticmethod
    def _check_hello(frame: Frame, role: str) -> None:
        lo, hi, their_role, _name = frame.fields
        if type(lo) is not int or type(hi) is not int or not lo <= PROTOCOL_VERSION <= hi:
            raise VersionMismatch(
                f"peer speaks versions {lo}..{hi}, this daemon speaks {PROTOCOL_VERSION}"
            )
        if their_role != role:
            raise UnexpectedFrame(f"a {their_role!r} said HELLO where a {role!r} was expected")

    def _call(self, consumer: Consumer, fields: list[Any]) -> None:
        req_id, method, args = fields
        handler = self._calls.get(method) if isinstance(method, str) else None
        try:
            if handler is None:
                raise DatModelNotSupported(message=f"unknown call {method!r}")
            if not isinstance(args, list):
                raise DatInvalidParameter(message="call arguments must be a list")
            result = handler(consumer, args)
            code, message = 0, ""
        except DatError as err:
            code, message, result = err.code, err.message, []
        except (TypeError, ValueError) as err:
            code, message, result = DatInvalidParameter().code, f"bad arguments: {err}", []
        consumer.channel.send(encode(FrameType.REPLY, req_id, code, message, result))

    def consumer_lost(self, consumer: Consumer) -> None:
        """The consumer's socket closed: free its IA abruptly, as dat_ia_close(ABRUPT) would."""
        if consumer.closed:
            return
        consumer.closed = True
        self.consumers.pop(consumer.id, None)
        for ep in list(consumer.eps.values()):
            self._destroy_ep(ep)
        for listener in list(consumer.psps.values()):
            self.listeners.pop(listener.conn_qual, None)
        for cr in list(consumer.crs.values()):
            self._drop_link(cr.link, "consumer went away before accepting")
        for rmr in consumer.rmrs.values():
            self._unbind(rmr)
        for lmr in list(consumer.lmrs.values()):
            self._release_lmr(consumer, lmr)
        self._shared_detach(consumer)
        log.info("consumer %s closed IA %d", consumer.name, consumer.id)

    # -- lookups -------------------------------------------------------------------------------

    @staticmethod
    def _ep(consumer: Consumer, handle: Any) -> Ep:
        return _lookup(consumer.eps, handle, Sub.INVALID_HANDLE_EP, "endpoint")

    @staticmethod
    def _pz(consumer: Consumer, handle: Any) -> int:
        if type(handle) is not int or handle not in consumer.pzs:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_PZ, f"no protection zone {handle!r}")
        return handle

    @staticmethod
    def _bytes(value: Any, what: str) -> bytes:
        if value is None:
            return b""
        if not isinstance(value, bytes) or len(value) > MAX_PRIVATE_DATA:
            raise DatInvalidParameter(message=f"{what} must be bytes of at most {MAX_PRIVATE_DATA}")
        return value

    # -- IA, PZ, LMR ---------------------------------------------------------------------------

    def _ia_query(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        return [ia_attributes(self.name, self.address_text, not self.memory.coherent)]

    def _pz_create(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        pz = self._handle()
        consumer.pzs[pz] = 0
        return [pz]

    def _pz_free(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        pz = self._pz(consumer, args[0])
        if consumer.pzs[pz]:
            raise DatInvalidState(Sub.INVALID_STATE_PZ_IN_USE, "an EP or LMR still uses this PZ")
        del consumer.pzs[pz]
        return []

    def _lmr_create(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        mem_type, region_description, length, pz_handle, privileges = args
        pz = self._pz(consumer, pz_handle)
        if type(privileges) is not int or privileges & ~int(MemPriv.ALL):
            raise DatInvalidParameter(Sub.INVALID_ARG6, f"bad mem_privileges {privileges!r}")
        privs = MemPriv(privileges)
        cookie = None
        if mem_type in (MemType.VIRTUAL, MemType.SHARED_VIRTUAL):
            if type(length) is not int or length <= 0:
                raise DatLengthError(message="length must be positive")
            if mem_type == MemType.SHARED_VIRTUAL:
                cookie, *region_description = region_description
                if not isinstance(cookie, bytes) or len(cookie) != LMR_COOKIE_SIZE:
                    raise DatInvalidParameter(Sub.INVALID_ARG3, "a DAT_LMR_COOKIE is 40 bytes")
            segment, offset, address = region_description
            if not isinstance(segment, str) or type(offset) is not int or type(address) is not int:
                raise DatInvalidParameter(Sub.INVALID_ARG3, "bad region description")
            if cookie is not None:
                self._check_shared(consumer, cookie, segment)
            view = self._map_range(segment, offset, length)
        elif mem_type == MemType.LMR:
            parent = (
                consumer.lmrs.get(region_description) if type(region_description) is int else None
            )
            if parent is None:
                raise DatInvalidHandle(Sub.INVALID_HANDLE_LMR, "region is not an LMR handle")
            segment, address, length = parent.segment, parent.region.address, parent.region.length
            offset, cookie = parent.offset, parent.cookie
            self.memory.map_segment(segment)
            view = parent.view[:]
        else:
            raise DatModelNotSupported(message=f"memory type {mem_type!r} is not offered")
        region = Region(address, length, pz, privs)
        lmr = self.memory.register(self._handle(), consumer.id, region, segment, view, offset)
        lmr.cookie = cookie
        consumer.lmrs[lmr.handle] = lmr
        consumer.pzs[pz] += 1
        return [lmr.handle, lmr.lmr_context, lmr.rmr_context, length, address]

    def _map_range(self, segment: str, offset: int, length: int) -> memoryview:
        """The consumer's bytes [offset, offset+length) of ``segment``, mapped by the daemon."""
        try:
            whole = self.memory.map_segment(segment)
        except (FileNotFoundError, ValueError) as err:
            raise DatInvalidParameter(Sub.INVALID_ARG3, f"cannot map {segment}: {err}") from None
        except OSError as err:  # out of descriptors or memory
            msg = f"cannot map {segment}: {err}"
            raise DatInsufficientResources(Sub.RESOURCE_MEMORY, msg) from None
        if offset < 0 or offset + length > len(whole):
            self.memory.unmap_segment(segment)
            raise DatInvalidParameter(Sub.INVALID_ARG4, "range outside the shared segment")
        return whole[offset : offset + length]

    def _check_shared(self, consumer: Consumer, cookie: bytes, segment: str) -> None:
        """SHARED_VIRTUAL: the memory must be the platform's shared region of this cookie."""
        if not segment.startswith(SHARED_SEGMENT_PREFIX):
            raise DatInvalidState(message="the buffer was not allocated as shared memory")
        region = self.shared.get(cookie)
        if region is None or region.segment != segment or consumer.id not in region.users:
            raise DatInvalidState(message="the buffer is not the shared region of this cookie")

    def _shared_attach(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        """Create or join the node's shared region of a cookie (the platform's primitive)."""
        cookie, size = args
        if not isinstance(cookie, bytes) or len(cookie) != LMR_COOKIE_SIZE:
            raise DatInvalidParameter(Sub.INVALID_ARG1, "a DAT_LMR_COOKIE is 40 bytes")
        if type(size) is not int or size <= 0:
            raise DatLengthError(message="size must be positive")
        region = self.shared.get(cookie)
        if region is None:
            segment = shared_segment_name(cookie)
            try:
                length = self.memory.create_segment(segment, size)
            except OSError as err:
                raise DatInsufficientResources(Sub.RESOURCE_MEMORY, str(err)) from None
            region = self.shared[cookie] = SharedRegion(segment, length)
        if size > region.length:
            raise DatInvalidParameter(
                Sub.INVALID_ARG2, f"the region of this cookie has {region.length} bytes"
            )
        region.users.add(consumer.id)
        return [region.segment, region.length]

    def _shared_detach(self, consumer: Consumer) -> None:
        for cookie, region in list(self.shared.items()):
            region.users.discard(consumer.id)
            if not region.users:
                del self.shared[cookie]
                self.memory.remove_segment(region.segment)

    def _lmr_sync(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        """dat_lmr_sync_rdma_write (to_cpu) and dat_lmr_sync_rdma_read, for any LMRs and PZs."""
        to_cpu, segments = args
        if not isinstance(segments, list):
            raise DatInvalidParameter(Sub.INVALID_ARG2, "local_segments must be a list")
        ranges = []
        for triplet in segments:
            address, length, context = parse_triplet(triplet)
            if length == 0:
                continue
            lmr = self.memory.by_lmr_context.get(context)
            if lmr is None or lmr.owner != consumer.id:
                raise DatInvalidParameter(Sub.INVALID_ARG2, f"no LMR with context {context:#x}")
            if not lmr.region.contains(address, length):
                raise DatInvalidParameter(
                    Sub.INVALID_ARG2, f"{address:#x}+{length} lies outside its LMR"
                )
            ranges.append((lmr, address, length))
        for lmr, address, length in ranges:  # all checked first: nothing half done
            self.memory.sync(lmr, address, length, bool(to_cpu))
        return []

    def _lmr_free(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        lmr = _lookup(consumer.lmrs, args[0], Sub.INVALID_HANDLE_LMR, "LMR")
        if lmr.bound_rmrs:
            raise DatInvalidState(Sub.INVALID_STATE_LMR_IN_USE, "an RMR is bound to this LMR")
        self._release_lmr(consumer, lmr)
        return []

    def _release_lmr(self, consumer: Consumer, lmr: Lmr) -> None:
        consumer.lmrs.pop(lmr.handle, None)
        if lmr.region.pz in consumer.pzs:
            consumer.pzs[lmr.region.pz] -= 1
        self.memory.free(lmr)
        self.memory.unmap_segment(lmr.segment)

    # -- memory windows ------------------------------------------------------------------------

    def _rmr(self, consumer: Consumer, handle: Any) -> Rmr:
        return _lookup(consumer.rmrs, handle, Sub.INVALID_HANDLE_RMR, "RMR")

    def _rmr_create(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        """dat_rmr_create: an unbound window in a PZ."""
        pz = self._pz(consumer, args[0])
        rmr = Rmr(self._handle(), pz)
        consumer.rmrs[rmr.handle] = rmr
        consumer.pzs[pz] += 1
        return [rmr.handle]

    def _rmr_free(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        """dat_rmr_free: a bound window is unbound first (its key stops working)."""
        rmr = self._rmr(consumer, args[0])
        self._unbind(rmr)
        del consumer.rmrs[rmr.handle]
        if rmr.pz in consumer.pzs:
            consumer.pzs[rmr.pz] -= 1
        return []

    def _unbind(self, rmr: Rmr) -> None:
        if rmr.context:
            self.memory.unbind(rmr.context)
        rmr.context, rmr.lmr, rmr.region = 0, None, None

    def _rmr_bind(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        """dat_rmr_bind: checked now, executed in posting order on the EP, completed with
        RMR_BIND_COMPLETION on its request EVD; returns the new rmr_context at once."""
        rmr_handle, lmr_handle, triplet, privileges, ep_handle, cookie, flags = args
        if type(cookie) is not int or not 0 <= cookie < 1 << 64:
            raise DatInvalidParameter(Sub.INVALID_ARG5, "user_cookie must be a u64")
        rmr = self._rmr(consumer, rmr_handle)
        ep = self._ep(consumer, ep_handle)
        address, length, context = parse_triplet(triplet)
        if type(privileges) is not int or privileges & ~int(MemPriv.ALL):
            raise DatInvalidParameter(Sub.INVALID_ARG3, f"bad mem_privileges {privileges!r}")
        remote = MemPriv(privileges) & (MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE)
        lmr = None
        if length:
            lmr = consumer.lmrs.get(lmr_handle) if type(lmr_handle) is int else None
            if lmr is None:
                lmr = self.memory.by_lmr_context.get(context)
            if lmr is None or lmr.owner != consumer.id or lmr.lmr_context != context:
                raise DatInvalidHandle(Sub.INVALID_HANDLE_LMR, "the triplet names no LMR")
            if not lmr.region.contains(address, length):
                raise DatInvalidParameter(Sub.INVALID_ARG2, "the range exceeds the LMR")
            local = lmr.region.privileges
            if (remote & MemPriv.REMOTE_READ and not local & MemPriv.LOCAL_READ) or (
                remote & MemPriv.REMOTE_WRITE and not local & MemPriv.LOCAL_WRITE
            ):
                raise DatPrivilegesViolation(
                    message="remote read needs the LMR's local read, remote write its local write"
                )
            if rmr.pz != lmr.region.pz or rmr.pz != ep.pz:
                raise DatProtectionViolation(message="the RMR, LMR and EP are not in one PZ")
        if ep.state not in ep_states.REQUEST_POST_STATES:
            raise ep_states.state_error(ep.state, "dat_rmr_bind")
        if type(flags) is not int or type(cookie) is not int:
            raise DatInvalidParameter(Sub.INVALID_ARG6, "bad completion flags or cookie")
        key = self.memory.reserve_key() if length else 0
        op = Op(Dtos.BIND_MW, cookie, flags, 0, 0, [])
        op.bind = Bind(rmr, lmr, Region(address, length, rmr.pz, remote), key)
        self._enqueue(ep, op)
        return [key]

    def _bind(self, ep: Ep, op: Op) -> None:
        """Execute a bind: the window's previous key dies, the promised one starts to work."""
        bind = op.bind
        assert bind is not None
        rmr = bind.rmr
        self._unbind(rmr)
        lmr = bind.lmr
        if self.faults.active and ep.link is not None:  # a bind fault: it fails at execution
            link = ep.link
            msg = Message(
                self.name,
                link.remote_node,
                link.id,
                link.messages,
                "RMR_BIND",
                bind.region.length,
                bind.key or None,
                None,
            )
            rule = self.faults.decide(msg, self.shell.now())
            if rule is not None and rule.action in ("status", "drop", "corrupt"):
                self.faults.record(rule, msg)
                op.done = True
                op.status = (
                    St(rule.status) if rule.action == "status" else (St.RMR_OPERATION_FAILED)
                )
                return
        if lmr is not None:
            if self.memory.by_lmr_context.get(lmr.lmr_context) is not lmr:
                op.done, op.status = True, St.RMR_OPERATION_FAILED  # the LMR went away
                return
            self.memory.bind(bind.key, Window(bind.region, lmr))
            rmr.context, rmr.lmr, rmr.region = bind.key, lmr, bind.region
        op.done = True

    # -- fault injection (the admin surface) --------------------------------------------------

    def _fault_add(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        """Install rules (in force when the call returns); an optional seed first."""
        rules, seed = args
        if seed is not None:
            if type(seed) is not int:
                raise DatInvalidParameter(Sub.INVALID_ARG2, "the seed is an integer")
            self.faults.seed = seed
        try:
            parsed = [Rule.from_json(r) for r in rules]
        except (TypeError, ValueError) as err:
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"bad fault rule: {err}") from None
        for rule in parsed:
            self.faults.add(rule, self.shell.now())
            log.info("fault rule %s installed: %s", rule.name, rule.to_json())
        return [len(self.faults.rules)]

    def _fault_remove(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        if not self.faults.remove(str(args[0])):
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"no fault rule {args[0]!r}")
        return [len(self.faults.rules)]

    def _fault_clear(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        self.faults.clear()
        for link in self.links.values():  # nothing held back any more
            if link.delayed:
                if link.release is not None:
                    link.release.cancel()
                self._release(link, everything=True)
        return [len(self.faults.rules)]

    def _fault_list(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        return [[rule.to_json() for rule in self.faults.rules.values()], self.faults.seed]

    def _fault_log(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        lines = list(self.faults.log)
        if args and args[0]:
            self.faults.log.clear()
        return [lines]

    def _rmr_revoke(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        """Revoke a remote key (of any consumer of this node): later accesses fail."""
        key = args[0]
        entry = self.memory.by_rmr_context.get(key) if type(key) is int else None
        if entry is None:
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"no rmr_context {key!r}")
        if isinstance(entry, Lmr):
            del self.memory.by_rmr_context[key]
        else:
            self.memory.unbind(key)
        log.info("rmr_context %#x revoked", key)
        return []

    def _node_crash(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        log.warning("crash requested: the node dies now")
        self.shell.crash()
        return []

    def _node_status(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        return [
            {
                "name": self.name,
                "address": self.address_text,
                "pid": self.pid,
                "links": len(self.links),
                "consumers": len(self.consumers),
                "rules": len(self.faults.rules),
            }
        ]

    # -- endpoints -----------------------------------------------------------------------------

    def _ep_create(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        pz_handle, recv_evd, request_evd, connect_evd, attr = args
        pz = self._pz(consumer, pz_handle) if pz_handle else 0  # NULL: set by dat_ep_modify
        for evd in (recv_evd, request_evd, connect_evd):
            if type(evd) is not int or evd < 0:
                raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_CONN, f"bad EVD {evd!r}")
        ep = Ep(
            self._handle(), consumer, pz, recv_evd, request_evd, connect_evd, EpAttr.from_wire(attr)
        )
        consumer.eps[ep.handle] = ep
        if pz:
            consumer.pzs[pz] += 1
        return [ep.handle, ep.attr.to_wire()]

    def _ep_modify(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        """dat_ep_modify: PZ only in UNCONNECTED or TENTATIVE_CP; EVDs and attributes before
        the connection is made (UNCONNECTED, RESERVED, PASSIVE_CP, TENTATIVE_CP)."""
        ep = self._ep(consumer, args[0])
        changes = args[1]
        if not isinstance(changes, dict) or set(changes) - _MODIFIABLE:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"cannot modify {changes!r}")
        before_connect = (
            S.UNCONNECTED,
            S.RESERVED,
            S.PASSIVE_CONNECTION_PENDING,
            S.TENTATIVE_CONNECTION_PENDING,
        )
        if ep.state not in before_connect or (
            "pz" in changes and ep.state not in (S.UNCONNECTED, S.TENTATIVE_CONNECTION_PENDING)
        ):
            raise ep_states.state_error(ep.state, "dat_ep_modify")
        pz = self._pz(consumer, changes["pz"]) if changes.get("pz") else ep.pz
        attr = EpAttr.from_wire(changes["attr"]) if "attr" in changes else ep.attr
        for name in ("recv_evd", "request_evd", "connect_evd"):
            value = changes.get(name, 0)
            if type(value) is not int or value < 0:
                raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_CONN, f"bad EVD {value!r}")
        if pz != ep.pz:  # nothing is changed until everything is checked
            if ep.pz in consumer.pzs:
                consumer.pzs[ep.pz] -= 1
            consumer.pzs[pz] += 1
            ep.pz = pz
        ep.recv_evd = changes.get("recv_evd", ep.recv_evd)
        ep.request_evd = changes.get("request_evd", ep.request_evd)
        ep.connect_evd = changes.get("connect_evd", ep.connect_evd)
        ep.attr = attr
        return [ep.attr.to_wire(), ep.handle, ep.state]

    def _ep_free(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        ep = self._ep(consumer, args[0])
        if ep.state in ep_states.FREE_REFUSED:
            raise ep_states.state_error(ep.state, "dat_ep_free")
        self._destroy_ep(ep)
        return []

    def _destroy_ep(self, ep: Ep) -> None:
        """Implicit abrupt disconnect, then forget the EP (no events: the EP is gone)."""
        consumer = ep.consumer
        if ep.link is not None:
            self._send(ep.link, encode(FrameType.DISCONNECT))
            self._drop_link(ep.link, "endpoint freed")
        self._cancel_timer(ep)
        if ep.rsp is not None:
            self._remove_listener(ep.rsp)
        consumer.eps.pop(ep.handle, None)
        if ep.pz in consumer.pzs:
            consumer.pzs[ep.pz] -= 1
        ep.ops.clear()
        ep.recvs.clear()

    def _ep_connect(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        ep_handle, host, port, conn_qual, timeout_us, private_data = args
        ep = self._ep(consumer, ep_handle)
        if not isinstance(host, str) or type(port) is not int or not 0 < port < 65536:
            raise DatInvalidParameter(Sub.INVALID_ARG2, "remote address must be (host, port)")
        if type(conn_qual) is not int or conn_qual < 0:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "bad conn_qual")
        if type(timeout_us) is not int or timeout_us <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "timeout must be positive")
        pdata = self._bytes(private_data, "private_data")
        if ep.state == S.UNCONNECTED and (not ep.pz or not ep.connect_evd):
            raise DatInvalidState(
                Sub.INVALID_STATE_EP_NOTREADY,
                "the EP needs a PZ and a connect EVD before it connects",
            )
        ep.state, _ = ep_states.transition(ep.state, EpInput.CONNECT)
        link = self._new_link(active=True)
        link.ep = ep
        ep.link = link
        link.remote_name = f"{host}:{port}"
        link.remote_node = self.peer_names.get(link.remote_name, "")
        link.unsent.append(
            Frame(
                FrameType.CONN_REQ,
                [conn_qual, pdata, ep.attr.max_rdma_read_in, ep.attr.max_rdma_read_out],
            )
        )
        if timeout_us != 0xFFFFFFFF:
            ep.timer = self.shell.call_later(
                timeout_us / 1e6, lambda: self._ep_input(ep, EpInput.CONNECT_TIMEOUT)
            )
        self.shell.connect_peer(link, host, port)
        return [ep.handle, ep.state]

    def _ep_disconnect(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        ep = self._ep(consumer, args[0])
        flags = args[1]
        if flags not in (CloseFlags.ABRUPT, CloseFlags.GRACEFUL):
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad close flags {flags!r}")
        if flags == CloseFlags.GRACEFUL and ep.state == S.CONNECTED:
            ep.state, _ = ep_states.transition(ep.state, EpInput.DISCONNECT_GRACEFUL)
            self._maybe_drained(ep)
            return [ep.handle, ep.state]
        if flags == CloseFlags.GRACEFUL and ep.state == S.DISCONNECT_PENDING:
            return [ep.handle, ep.state]  # the spec: a second graceful request has no effect
        self._ep_input(
            ep,
            EpInput.DISCONNECT_ABRUPT
            if flags == CloseFlags.ABRUPT
            else EpInput.DISCONNECT_GRACEFUL,
            notify_peer=True,
        )
        return [ep.handle, ep.state]

    def _ep_reset(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        ep = self._ep(consumer, args[0])
        ep.state, _ = ep_states.transition(ep.state, EpInput.RESET)
        ep.next_seq, ep.acked, ep.reads_out, ep.reads_done = 1, 0, 0, 0
        return [ep.handle, ep.state]

    def _ep_input(
        self,
        ep: Ep,
        what: EpInput,
        private_data: bytes = b"",
        first_status: St | None = None,
        notify_peer: bool = False,
    ) -> None:
        """Drive the EP through the state table.

        Leaving the connection completes the failed DTO with its error, then posts the
        connection event, then flushes every other outstanding DTO in posting order.
        """
        if ep.handle not in ep.consumer.eps:
            return
        before = ep.state
        ep.state, event = ep_states.transition(ep.state, what)
        leaving = ep.state == S.DISCONNECTED and before != S.DISCONNECTED
        if leaving:
            self._cancel_timer(ep)
            link, ep.link = ep.link, None
            if link is not None:
                if notify_peer:
                    self._send(link, encode(FrameType.DISCONNECT))
                link.ep = None
                self._drop_link(link, what.name.lower())
            if first_status is not None and ep.ops:
                self._complete(ep, ep.ops.popleft(), first_status)
        if event is not None:
            self._conn_event(ep, event, private_data)
        if leaving:
            self._flush(ep, None)

    def _flush(self, ep: Ep, first_status: St | None) -> None:
        """Complete every outstanding DTO: the failed one with its error, the rest FLUSHED."""
        ep.held.clear()
        ep.reads_out = 0
        while ep.ops:
            op = ep.ops.popleft()
            status = first_status if first_status is not None else St.DTO_ERR_FLUSHED
            first_status = None
            self._complete(ep, op, status)
        while ep.recvs:
            recv = ep.recvs.popleft()
            self._dto_event(ep, ep.recv_evd, recv.cookie, St.DTO_ERR_FLUSHED, 0, Dtos.RECEIVE)

    def _cancel_timer(self, ep: Ep) -> None:
        if ep.timer is not None:
            ep.timer.cancel()
            ep.timer = None

    def _maybe_drained(self, ep: Ep) -> None:
        if ep.state == S.DISCONNECT_PENDING and not ep.ops:
            self._ep_input(ep, EpInput.DRAINED, notify_peer=True)

    # -- listeners and connection requests -----------------------------------------------------

    def _add_listener(
        self, consumer: Consumer, conn_qual: Any, evd: Any, flags: int, ep: Ep | None
    ) -> Listener:
        if type(conn_qual) is not int or conn_qual < 0:
            raise DatInvalidParameter(Sub.INVALID_ARG2, "bad conn_qual")
        if type(evd) is not int or evd <= 0:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_CR, f"bad EVD {evd!r}")
        if conn_qual in self.listeners:
            raise DatConnQualInUse(message=f"conn_qual {conn_qual} already has a listener")
        listener = Listener(self._handle(), consumer, conn_qual, evd, flags, ep)
        self.listeners[conn_qual] = listener
        consumer.psps[listener.handle] = listener
        return listener

    def _remove_listener(self, listener: Listener) -> None:
        if self.listeners.get(listener.conn_qual) is listener:
            del self.listeners[listener.conn_qual]
        listener.consumer.psps.pop(listener.handle, None)
        if listener.ep is not None:
            listener.ep.rsp = None

    def _psp_create(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        conn_qual, evd, flags, backlog = args
        if flags not in (PspFlags.CONSUMER, PspFlags.PROVIDER):
            raise DatInvalidParameter(Sub.INVALID_ARG4, f"bad PSP flags {flags!r}")
        if type(backlog) is not int or backlog <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "the CR EVD has no room")
        listener = self._add_listener(consumer, conn_qual, evd, flags, None)
        listener.backlog = backlog
        return [listener.handle]

    def _rsp_create(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        conn_qual, ep_handle, evd = args
        ep = self._ep(consumer, ep_handle)
        if ep.state != S.UNCONNECTED:
            raise ep_states.state_error(ep.state, "dat_rsp_create")
        listener = self._add_listener(consumer, conn_qual, evd, 0, ep)
        ep.state, _ = ep_states.transition(ep.state, EpInput.RSP_CREATE)
        ep.rsp = listener
        return [listener.handle, ep.handle, ep.state]

    def _listener_free(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        listener = _lookup(consumer.psps, args[0], Sub.INVALID_HANDLE_PSP, "service point")
        self._remove_listener(listener)
        ep = listener.ep
        if ep is None:
            return []
        if ep.state == S.RESERVED:
            ep.state, _ = ep_states.transition(ep.state, EpInput.RSP_FREE)
        return [ep.handle, ep.state]

    def _cr(self, consumer: Consumer, handle: Any) -> Cr:
        return _lookup(consumer.crs, handle, Sub.INVALID_HANDLE_CR, "connection request")

    def _cr_accept(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        cr = self._cr(consumer, args[0])
        pdata = self._bytes(args[2], "private_data")
        if args[1] in (None, 0):
            if cr.ep is None:
                raise DatInvalidHandle(Sub.INVALID_HANDLE_EP, "this request carries no endpoint")
            ep = cr.ep
        else:
            ep = self._ep(consumer, args[1])
            if cr.ep is not None:
                raise DatInvalidHandle(Sub.INVALID_HANDLE_EP, "this request carries its own EP")
            if ep.state != S.UNCONNECTED:  # a PASSIVE_CP EP waits for its own RSP's request
                raise ep_states.state_error(ep.state, "dat_cr_accept with this EP")
        if not ep.pz or not ep.connect_evd:
            raise DatInvalidState(
                Sub.INVALID_STATE_EP_NOTREADY,
                "the EP needs a PZ and a connect EVD (dat_ep_modify) before it accepts",
            )
        ep.state, _ = ep_states.transition(ep.state, EpInput.ACCEPT)
        del consumer.crs[cr.handle]
        link = cr.link
        link.cr = None
        if link.closed:
            self._ep_input(ep, EpInput.ACCEPT_FAILED)
            return [ep.handle, ep.state]
        ep.link, link.ep = link, ep
        self._send(
            link,
            encode(
                FrameType.CONN_ACCEPT, pdata, ep.attr.max_rdma_read_in, ep.attr.max_rdma_read_out
            ),
        )
        return [ep.handle, ep.state]

    def _cr_reject(self, consumer: Consumer, args: list[Any]) -> list[Any]:
        cr = self._cr(consumer, args[0])
        pdata = self._bytes(args[1], "private_data")
        del consumer.crs[cr.handle]
        ep = cr.ep
        self._send(cr.link, encode(FrameType.CONN_REJECT, True, pdata))
        self._drop_link(cr.link, "connection request rejected")
        if ep is not None and ep.state == S.TENTATIVE_CONNECTION_PENDING:
            self._destroy_ep(ep)  # the provider made it, the provider frees it
            return []
        if ep is not None and ep.state == S.PASSIVE_CONNECTION_PENDING:
            ep.state, _ = ep_states.transition(ep.state, EpInput.REJECT)
        return [ep.handle, ep.state] if ep is not None else []

    # -- peer links ----------------------------------------------------------------------------

    def _new_link(self, active: bool) -> PeerLink:
        link = PeerLink(self._handle(), active)
        self.links[link.id] = link
        return link

    def peer_accepted(self, channel: Channel) -> PeerLink:
        """A peer daemon connected to our TCP port."""
        link = self._new_link(active=False)
        link.channel = channel
        return link

    def link_up(self, link: PeerLink, channel: Channel) -> None:
        """Our outgoing connection is established: say HELLO and send the queued CONN_REQ."""
        if link.closed:
            channel.close("endpoint gave up before the connection was made")
            return
        link.channel = channel
        self._send(link, self._hello())
        while link.unsent:
            f = link.unsent.pop(0)
            self._send(link, encode(f.type, *f.fields))

    def link_failed(self, link: PeerLink, reason: str) -> None:
        """Our outgoing connection could not be made: the address is unreachable."""
        log.info("connect failed: %s", reason)
        link.closed = True
        self.links.pop(link.id, None)
        ep = link.ep
        if ep is not None and ep.state == S.ACTIVE_CONNECTION_PENDING:
            ep.link = None
            self._ep_input(ep, EpInput.UNREACHABLE)

    def link_lost(self, link: PeerLink, reason: str) -> None:
        """The stream ended or was cut: break whatever it carried."""
        if link.closed:
            return
        log.info("link %d to %s lost: %s", link.id, link.remote_name or "?", reason)
        link.closed = True
        self.links.pop(link.id, None)
        ep, link.ep = link.ep, None
        if ep is not None and ep.link is link:
            ep.link = None
            if ep.state == S.COMPLETION_PENDING:
                self._ep_input(ep, EpInput.ACCEPT_FAILED)
            elif ep.state == S.ACTIVE_CONNECTION_PENDING:
                # lost before the peer said HELLO: no fabric node could be reached there
                self._ep_input(ep, EpInput.NON_PEER_REJECTED if link.hello else EpInput.UNREACHABLE)
            elif ep.state in (S.CONNECTED, S.DISCONNECT_PENDING):
                first = St.DTO_ERR_TRANSPORT if ep.ops else None
                self._ep_input(ep, EpInput.BROKEN, first_status=first)

    def _drop_link(self, link: PeerLink, reason: str) -> None:
        if link.closed:
            return
        link.closed = True
        self.links.pop(link.id, None)
        if link.channel is not None:
            link.channel.close(reason)

    def _send(self, link: PeerLink, header: bytes, payload: Sequence[memoryview] = ()) -> None:
        """Every frame to a peer leaves here (through the fault rules, when there are any)."""
        if link.channel is None or link.closed:
            return
        if self.faults.active:
            self._faulty_send(link, header, payload)
            return
        link.messages += 1
        link.channel.send(header, payload)
        link.sent = True

    def _emit(
        self, link: PeerLink, header: bytes, payload: Sequence[memoryview], delay: float = 0.0
    ) -> None:
        """Send, or queue until ``delay`` from now: a link keeps its order (a slow link, never
        a shuffle), so nothing leaves before what was queued ahead of it."""
        if link.channel is None or link.closed:
            return
        if delay <= 0 and not link.delayed:
            link.channel.send(header, payload)
            link.sent = True
            return
        now = self.shell.now()
        at = max(now + delay, link.delayed[-1][0] if link.delayed else now)
        link.delayed.append((at, header, list(payload)))
        if link.release is None:
            link.release = self.shell.call_later(at - now, lambda: self._release(link))

    def _release(self, link: PeerLink, everything: bool = False) -> None:
        """Send what is due (or everything: the rules were cleared); re-arm for the rest."""
        link.release = None
        now = self.shell.now()
        while link.delayed and link.channel is not None and not link.closed:
            at, header, payload = link.delayed[0]
            if at > now + 1e-4 and not everything:
                link.release = self.shell.call_later(at - now, lambda: self._release(link))
                return
            link.delayed.popleft()
            link.channel.send(header, payload)
        link.delayed.clear()

    def _faulty_send(self, link: PeerLink, header: bytes, payload: Sequence[memoryview]) -> None:
        """Apply the first rule that fires: RC retries lost requests and read responses up to
        RETRY_COUNT times (each retry is a new message, decided anew), then gives up."""
        frame = decode_header(memoryview(header)[4:])
        kind = frame.type
        name, seq, rmr_context, size = _fault_view(frame)
        retries = RETRY_COUNT if kind in _RETRIED else 0
        for _ in range(retries + 1):
            link.messages += 1
            msg = Message(
                self.name, link.remote_node, link.id, link.messages, name, size, rmr_context, seq
            )
            rule = self.faults.decide(msg, self.shell.now())
            if rule is None:
                self._emit(link, header, payload)
                return
            action = rule.action
            if (
                action == "corrupt"
                and rule.silent
                and rule.part == "header"
                and (kind in (FrameType.WRITE, FrameType.READ_REQ))
            ):  # a flipped address bit: the access lands elsewhere, or is refused
                bit = 3 + int(
                    chance(
                        self.faults.seed + 3,
                        rule.name,
                        msg.src,
                        msg.dst,
                        msg.connection,
                        msg.number,
                    )
                    * 6
                )
                fields = list(frame.fields)
                fields[1] ^= 1 << bit
                self.faults.record(rule, msg, address=fields[1], was=frame.fields[1])
                self._emit(link, encode(kind, *fields, payload_len=frame.payload_len), payload)
                return
            if action == "corrupt" and rule.silent and rule.part == "payload" and payload:
                data = bytearray(b"".join(bytes(v) for v in payload))
                offset = int(
                    chance(
                        self.faults.seed + 2,
                        rule.name,
                        msg.src,
                        msg.dst,
                        msg.connection,
                        msg.number,
                    )
                    * len(data)
                )
                data[offset] ^= 0xFF
                self.faults.record(rule, msg, offset=offset)
                self._emit(link, header, [memoryview(data)])
                return
            self.faults.record(rule, msg)
            if action in ("drop", "corrupt"):
                continue  # lost (a detected corruption is dropped): retried
            if action == "blackhole":
                return
            if action == "delay":
                self._emit(link, header, payload, self.faults.jitter(rule, msg))
                return
            if action == "bandwidth":
                now = self.shell.now()
                link.busy_until = max(link.busy_until, now) + (size or 64) / (rule.rate_MBps * 1e6)
                self._emit(link, header, payload, link.busy_until - now)
                return
            if action == "duplicate":
                self._emit(link, header, payload)
                self._emit(link, header, payload)
                return
            if action == "reset":
                self._reset(link, f"fault rule {rule.name}: reset")
                return
            if kind in _REQUESTS and link.ep is not None:  # status, rnr
                status = St.DTO_ERR_RECEIVER_NOT_READY if action == "rnr" else St(rule.status)
                self._fail_request(link.ep, seq, status)
                return
            self._emit(link, header, payload)
            return
        if kind in _REQUESTS and link.ep is not None:
            self._fail_request(link.ep, seq, St.DTO_ERR_TRANSPORT)
        else:
            self._reset(link, "a response was lost past the retry count")

    def _fail_request(self, ep: Ep, seq: int | None, status: St) -> None:
        """The request ``seq`` is done, with an error: it breaks the EP when it retires."""
        op = self._op(ep, seq)
        if op is not None:
            op.done, op.status = True, status

    def _reset(self, link: PeerLink, reason: str) -> None:
        """A connection reset: both ends see the stream end (a connect: the host unreachable)."""
        if link.active and not link.hello:
            channel = link.channel
            self.link_failed(link, reason)
            if channel is not None:
                channel.close(reason)
            return
        channel = link.channel
        self.link_lost(link, reason)
        if channel is not None:
            channel.close(reason)

    def tick(self, now: float) -> None:
        """Every heartbeat interval: a HEARTBEAT on each quiet stream, and a stream that has
        heard nothing for the heartbeat timeout is taken as cut (a silent partition)."""
        for link in list(self.links.values()):
            if link.channel is None or link.closed or link.local:
                continue
            if link.heard or not link.last_heard:
                link.heard, link.last_heard = False, now
            elif now - link.last_heard > self.heartbeat_timeout * (1 if link.hello else 10):
                reason = f"nothing heard for {now - link.last_heard:.1f} s (heartbeat timeout)"
                self.link_lost(link, reason)
                if link.channel is not None:
                    link.channel.close(reason)
                continue
            if not link.sent and link.hello:  # never before the HELLOs are exchanged
                self._send(link, _HEARTBEAT)
            link.sent = False

    def peer_sink(self, link: PeerLink, frame: Frame) -> Sink:
        """Where the payload of a frame from a peer lands: straight into registered memory.

        Behind a send that found no receive (receiver not ready) every payload is held, so
        that the frames execute in order once a receive is posted.
        """
        if frame.type in _REQUESTS and self._duplicate(link, frame):
            return DISCARD
        if link.stalled:
            return None
        return self._data_sink(link, frame)

    @staticmethod
    def _duplicate(link: PeerLink, frame: Frame) -> bool:
        """A request seen before (a duplicated or retried message): RC executes it once."""
        seq = frame.fields[0]
        if type(seq) is not int:
            raise MalformedFrame("a request's sequence number must be an integer")
        return seq <= link.acked or any(f.fields[0] == seq for f in link.stalled)

    def _data_sink(self, link: PeerLink, frame: Frame) -> Sink:
        ep = link.ep
        kind = frame.type
        if ep is None:
            return DISCARD
        if kind == FrameType.WRITE:
            seq, address, rmr_context = frame.fields
            view = self.memory.remote(
                rmr_context, address, frame.payload_len, MemPriv.REMOTE_WRITE, ep.pz
            )
            if view is None:
                link.fault = (seq, St.DTO_ERR_REMOTE_ACCESS)
                return DISCARD
            if not self.memory.coherent:
                self.memory.mark_written(rmr_context, address, frame.payload_len)
            return [view]
        if kind == FrameType.SEND:
            if not ep.recvs:
                return None  # receiver not ready: hold the payload, stall the stream
            recv = ep.recvs[0]
            if frame.payload_len > recv.capacity:
                link.fault = (frame.fields[0], St.DTO_ERR_LOCAL_LENGTH)
                return DISCARD
            return _truncate(recv.views, frame.payload_len)
        if kind == FrameType.READ_RESP:
            op = self._op(ep, frame.fields[0])
            if op is None and type(frame.fields[0]) is int and frame.fields[0] < ep.next_seq:
                return DISCARD  # a duplicate of a response already landed
            if op is None or op.kind != Dtos.RDMA_READ or frame.payload_len > op.length:
                raise MalformedFrame("read response matches no outstanding RDMA Read")
            return _truncate(op.views, frame.payload_len)
        raise MalformedFrame(f"{kind.name} carries no payload")

    @staticmethod
    def _op(ep: Ep, seq: Any) -> Op | None:
        for op in ep.ops:
            if op.seq == seq:
                return op
            if op.seq > seq:
                break
        return None

    def peer_frame(self, link: PeerLink, frame: Frame) -> None:
        """Handle one complete frame from a peer daemon."""
        if not link.hello:
            if frame.type != FrameType.HELLO:
                raise UnexpectedFrame(f"expected HELLO, got {frame.type.name}")
            self._check_hello(frame, ROLE_PEER)
            link.hello = True
            node, _, address = str(frame.fields[3]).rpartition("@")
            link.remote_node, link.remote_name = node or address, address
            self.peer_names[address] = link.remote_node
            if not link.active:
                self._send(link, self._hello())
            return
        kind = frame.type
        if kind in _DATA_FRAMES and frame.payload is None and self._duplicate(link, frame):
            link.ack_due = True  # answer it again; do not execute it again
            return
        if kind in _DATA_FRAMES:
            not_ready = kind == FrameType.SEND and link.ep is not None and not link.ep.recvs
            if link.stalled or frame.payload is not None or not_ready:  # receiver not ready
                link.stalled.append(frame)
            else:
                self._execute(link, frame)
        elif kind == FrameType.ACK:
            self._acked(link, frame.fields[0])
        elif kind == FrameType.READ_RESP:
            self._read_landed(link, frame)
        elif kind == FrameType.NAK:
            self._nak(link, frame.fields[0], St(frame.fields[1]))
        elif kind == FrameType.CONN_REQ:
            self._conn_request(link, frame.fields)
        elif kind == FrameType.CONN_ACCEPT:
            self._conn_accepted(link, frame.fields)
        elif kind == FrameType.CONN_REJECT:
            self._conn_rejected(link, frame.fields)
        elif kind == FrameType.CONN_RTU:
            self._rtu(link)
        elif kind == FrameType.DISCONNECT:
            self._peer_disconnect(link)
        elif kind == FrameType.HEARTBEAT:
            pass
        elif kind == FrameType.ERROR:
            self.link_lost(link, f"peer reported: {frame.fields[0]}")
        else:
            raise UnexpectedFrame(f"{kind.name} is not a peer frame")

    def _execute(self, link: PeerLink, frame: Frame) -> None:
        """Carry out a request whose payload (if any) has landed."""
        kind = frame.type
        if kind == FrameType.WRITE:
            self._target_done(link, frame.fields[0])
        elif kind == FrameType.READ_REQ:
            self._serve_read(link, frame.fields)
        else:
            self._receive(link, frame)

    def peer_batch_end(self, link: PeerLink) -> None:
        """After one read from the stream: one cumulative ACK for everything executed."""
        link.heard = True
        if link.ack_due and not link.closed:
            link.ack_due = False
            self._send(link, encode(FrameType.ACK, link.acked))

    # -- connection management on the wire -----------------------------------------------------

    def _conn_request(self, link: PeerLink, fields: list[Any]) -> None:
        conn_qual, pdata, rd_in, rd_out = fields
        listener = self.listeners.get(conn_qual)
        if listener is not None and listener.ep is None:
            waiting = sum(1 for cr in listener.consumer.crs.values() if cr.listener is listener)
            if waiting >= listener.backlog:  # the PSP's EVD is its backlog
                log.info("conn_qual %d: backlog of %d full", conn_qual, listener.backlog)
                listener = None
        if listener is None or link.active or link.ep is not None or link.cr is not None:
            self._send(link, encode(FrameType.CONN_REJECT, False, b""))
            self._drop_link(link, f"no listener on conn_qual {conn_qual}")
            return
        consumer = listener.consumer
        cr = Cr(self._handle(), consumer, link, listener, bytes(pdata or b""), rd_in, rd_out)
        consumer.crs[cr.handle] = cr
        link.cr = cr
        if listener.ep is not None:  # an RSP fires once
            cr.ep = listener.ep
            self._remove_listener(listener)
            cr.ep.state, _ = ep_states.transition(cr.ep.state, EpInput.REQUEST_ARRIVED)
        elif listener.flags & PspFlags.PROVIDER:  # an EP with no PZ or EVDs yet
            cr.ep = Ep(
                self._handle(), consumer, 0, 0, 0, 0, EpAttr(), S.TENTATIVE_CONNECTION_PENDING
            )
            consumer.eps[cr.ep.handle] = cr.ep
        ep_handle = 0
        if cr.ep is not None:
            ep_handle = cr.ep.handle
        self._push(
            consumer,
            [
                E.CONNECTION_REQUEST_EVENT,
                listener.evd,
                listener.handle,
                conn_qual,
                cr.handle,
                link.remote_name,
                cr.private_data,
                ep_handle,
            ],
        )

    def _conn_accepted(self, link: PeerLink, fields: list[Any]) -> None:
        ep = link.ep
        if ep is None or not link.active:
            raise UnexpectedFrame("CONN_ACCEPT on a link with no connecting endpoint")
        pdata = bytes(fields[0] or b"")
        self._cancel_timer(ep)
        self._ep_input(ep, EpInput.PEER_ACCEPTED, pdata)
        self._send(link, encode(FrameType.CONN_RTU))

    def _conn_rejected(self, link: PeerLink, fields: list[Any]) -> None:
        by_peer, pdata = fields
        ep = link.ep
        if ep is None:
            return
        what = EpInput.PEER_REJECTED if by_peer else EpInput.NON_PEER_REJECTED
        self._ep_input(ep, what, bytes(pdata or b"") if by_peer else b"")

    def _rtu(self, link: PeerLink) -> None:
        ep = link.ep
        if ep is None or ep.state != S.COMPLETION_PENDING:
            raise UnexpectedFrame("RTU with no accepted endpoint")
        self._ep_input(ep, EpInput.RTU)

    def _peer_disconnect(self, link: PeerLink) -> None:
        ep = link.ep
        if ep is None:
            self._drop_link(link, "peer disconnected")
            return
        self._ep_input(ep, EpInput.PEER_DISCONNECTED)

    # -- the data path: initiator --------------------------------------------------------------

    def _post(self, consumer: Consumer, kind: FrameType, fields: list[Any]) -> None:
        ep = consumer.eps.get(fields[0])
        if ep is None:
            log.warning("consumer %s posted to unknown EP %r", consumer.name, fields[0])
            return
        cookie, flags, local_iov = fields[1], fields[2], fields[3]
        if kind == FrameType.POST_RECV:
            self._post_recv(ep, cookie, flags, local_iov)
            return
        dto = _POST_DTOS[kind]
        op = Op(dto, cookie, flags, 0, 0, [])
        remote = None
        try:
            need = MemPriv.LOCAL_WRITE if dto == Dtos.RDMA_READ else MemPriv.LOCAL_READ
            op.views, op.length = self._local_views(consumer, ep, local_iov, need)
            remote = parse_triplet(fields[4]) if dto != Dtos.SEND else None
        except DatError as err:
            # as on hardware: this DTO fails at once, then the connection breaks and every
            # DTO still outstanding is flushed
            log.info("EP %d: local check failed: %s", ep.handle, err)
            self._complete(ep, op, St.DTO_ERR_LOCAL_PROTECTION)
            if ep.state in (S.CONNECTED, S.DISCONNECT_PENDING):
                self._ep_input(ep, EpInput.BROKEN, notify_peer=True)
            return
        if remote is not None:
            op.remote = remote
            if dto == Dtos.RDMA_READ:
                op.length = remote[1]
        self._enqueue(ep, op)

    def _enqueue(self, ep: Ep, op: Op) -> None:
        """Queue a request DTO in posting order; it starts when nothing holds it back."""
        if op.kind != Dtos.BIND_MW:
            op.seq = ep.next_seq
            ep.next_seq += 1
        ep.ops.append(op)
        if ep.state != S.CONNECTED or ep.link is None:
            self._flush(ep, None if ep.state == S.DISCONNECTED else St.DTO_ERR_LOCAL_EP)
            return
        ep.held.append(op)
        self._transmit(ep)

    def _transmit(self, ep: Ep) -> None:
        """Start held DTOs in order. An RDMA Read waits for a read credit (max_rdma_read_out),
        a BARRIER_FENCE DTO for every earlier read, and whatever was posted later waits too."""
        link = ep.link
        while ep.held and link is not None and ep.link is link:
            op = ep.held[0]
            if ep.reads_out and (
                op.flags & CompletionFlags.BARRIER_FENCE
                or (op.kind == Dtos.RDMA_READ and ep.reads_out >= ep.attr.max_rdma_read_out)
            ):
                break
            ep.held.popleft()
            if op.kind == Dtos.RDMA_WRITE:
                address, _, rmr_context = op.remote
                hdr = encode(FrameType.WRITE, op.seq, address, rmr_context, payload_len=op.length)
                self._send(link, hdr, op.views)
            elif op.kind == Dtos.SEND:
                self._send(link, encode(FrameType.SEND, op.seq, payload_len=op.length), op.views)
            elif op.kind == Dtos.RDMA_READ:
                ep.reads_out += 1
                address, length, rmr_context = op.remote
                self._send(
                    link,
                    encode(FrameType.READ_REQ, op.seq, address, rmr_context, length, ep.reads_done),
                )
            else:
                self._bind(ep, op)
                if op.status != St.DTO_SUCCESS:
                    break
        self._retire(ep)

    def _local_views(
        self, consumer: Consumer, ep: Ep, iov: Any, need: MemPriv
    ) -> tuple[list[memoryview], int]:
        found: dict[int, Lmr] = {}  # id(region) -> its LMR, for the segments that pass

        def lookup(ctx: int) -> Region | None:
            lmr = self.memory.by_lmr_context.get(ctx)
            if lmr is None or lmr.owner != consumer.id:
                return None
            found[id(lmr.region)] = lmr
            return lmr.region

        used = check_local_iov(iov, lookup, ep.pz, need, 1 << 16)
        views = [found[id(region)].local(address, length) for region, address, length in used]
        return views, sum(length for _, _, length in used)

    def _post_recv(self, ep: Ep, cookie: int, flags: int, local_iov: Any) -> None:
        try:
            views, capacity = self._local_views(ep.consumer, ep, local_iov, MemPriv.LOCAL_WRITE)
        except DatError as err:  # as a failed request DTO: the error, then the connection breaks
            log.info("EP %d: receive buffer refused: %s", ep.handle, err)
            self._dto_event(ep, ep.recv_evd, cookie, St.DTO_ERR_LOCAL_PROTECTION, 0, Dtos.RECEIVE)
            if (ep.state, EpInput.BROKEN) in ep_states.TABLE:
                self._ep_input(ep, EpInput.BROKEN, notify_peer=True)
            return
        if ep.state == S.DISCONNECTED:
            self._dto_event(ep, ep.recv_evd, cookie, St.DTO_ERR_FLUSHED, 0, Dtos.RECEIVE)
            return
        ep.recvs.append(Recv(cookie, flags, views, capacity))
        if ep.link is not None and ep.link.stalled:
            self._unstall(ep.link)

    def _complete(self, ep: Ep, op: Op, status: St) -> None:
        evd = ep.request_evd
        success = status == St.DTO_SUCCESS
        if success and op.flags & CompletionFlags.SUPPRESS:
            evd = 0  # no event: the consumer only gets its queue slot back
        notify = not (success and op.flags & CompletionFlags.UNSIGNALLED)
        if op.kind == Dtos.BIND_MW:
            if op.bind is not None and status != St.DTO_SUCCESS:  # flushed or failed
                self.memory.unbind(op.bind.key)
            event = [
                E.RMR_BIND_COMPLETION_EVENT,
                evd,
                ep.handle,
                op.bind.rmr.handle if op.bind else 0,
                op.cookie,
                status,
                notify,
            ]
            self._push(ep.consumer, event)
            return
        length = op.length if success else 0
        self._dto_event(ep, evd, op.cookie, status, length, op.kind, notify)

    def _retire(self, ep: Ep) -> None:
        """Complete, in posting order, every DTO at the head of the queue that is finished."""
        ops = ep.ops
        while ops:
            op = ops[0]
            if not op.done and (op.kind in _ANSWERED or op.seq > ep.acked):
                break
            if op.status != St.DTO_SUCCESS:  # in order, after what finished before it
                self._ep_input(ep, EpInput.BROKEN, first_status=op.status, notify_peer=True)
                return
            ops.popleft()
            self._complete(ep, op, St.DTO_SUCCESS)
        self._maybe_drained(ep)

    def _acked(self, link: PeerLink, seq: Any) -> None:
        ep = link.ep
        if ep is None:
            return
        if type(seq) is not int or seq >= ep.next_seq:
            raise MalformedFrame(f"ACK of {seq!r}, which was never sent")
        if seq > ep.acked:
            ep.acked = seq
            self._retire(ep)

    def _read_landed(self, link: PeerLink, frame: Frame) -> None:
        ep = link.ep
        if ep is None:
            return
        op = self._op(ep, frame.fields[0])
        if op is None or op.done:
            return  # a duplicate (its sink was DISCARD)
        op.done = True
        op.length = frame.payload_len
        ep.reads_out -= 1
        ep.reads_done += 1
        self._transmit(ep)

    def _nak(self, link: PeerLink, seq: Any, status: St) -> None:
        ep = link.ep
        if ep is None:
            return
        if type(seq) is int and seq - 1 > ep.acked:
            ep.acked = seq - 1  # everything before the refused request was executed
            self._retire(ep)
        self._ep_input(ep, EpInput.BROKEN, first_status=status)

    # -- the data path: target -----------------------------------------------------------------

    def _target_done(self, link: PeerLink, seq: int) -> None:
        if link.fault is not None:
            self._target_fault(link)
            return
        link.acked = seq
        link.ack_due = True

    def _target_fault(self, link: PeerLink) -> None:
        assert link.fault is not None
        seq, status = link.fault
        link.fault = None
        self._send(link, encode(FrameType.NAK, seq, status))
        ep = link.ep
        if ep is not None:
            self._ep_input(ep, EpInput.BROKEN)
        else:
            self._drop_link(link, "remote access error")

    def _serve_read(self, link: PeerLink, fields: list[Any]) -> None:
        seq, address, rmr_context, length, reads_done = fields
        ep = link.ep
        if ep is None:
            raise UnexpectedFrame("RDMA Read request on a link with no endpoint")
        link.reads_in += 1
        if type(reads_done) is not int or link.reads_in - reads_done > ep.attr.max_rdma_read_in:
            log.info(
                "EP %d: more incoming RDMA Reads than max_rdma_read_in=%d",
                ep.handle,
                ep.attr.max_rdma_read_in,
            )
            link.fault = (seq, St.DTO_ERR_REMOTE_RESPONDER)
            self._target_fault(link)
            return
        view = None
        if type(length) is int and 0 <= length <= ep.attr.max_rdma_size:
            view = self.memory.remote(rmr_context, address, length, MemPriv.REMOTE_READ, ep.pz)
        if view is None:
            link.fault = (seq, St.DTO_ERR_REMOTE_ACCESS)
            self._target_fault(link)
            return
        if not self.memory.coherent and self.memory.stale(rmr_context, address, length):
            log.warning(
                "RDMA Read of %#x+%d on EP %d serves the I/O view, which differs from "
                "the CPU's bytes: dat_lmr_sync_rdma_read was not called after they were "
                "written",
                address,
                length,
                ep.handle,
            )
        self._send(link, encode(FrameType.READ_RESP, seq, payload_len=length), [view])
        link.acked = seq
        link.ack_due = True

    def _receive(self, link: PeerLink, frame: Frame) -> None:
        ep = link.ep
        assert ep is not None
        seq = frame.fields[0]
        if link.fault is not None:
            recv = ep.recvs.popleft()
            self._dto_event(ep, ep.recv_evd, recv.cookie, St.DTO_ERR_LOCAL_LENGTH, 0, Dtos.RECEIVE)
            link.fault = (seq, St.DTO_ERR_REMOTE_RESPONDER)
            self._target_fault(link)
            return
        recv = ep.recvs.popleft()
        self._dto_event(
            ep, ep.recv_evd, recv.cookie, St.DTO_SUCCESS, frame.payload_len, Dtos.RECEIVE
        )
        link.acked = seq
        link.ack_due = True

    def _unstall(self, link: PeerLink) -> None:
        """A receive was posted: run, in order, the frames held behind the send that had none."""
        ep = link.ep
        while link.stalled and ep is not None and link.ep is ep:
            frame = link.stalled[0]
            if frame.type == FrameType.SEND and not ep.recvs:
                break
            link.stalled.popleft()
            if frame.payload_len:
                sink = self._data_sink(link, frame)
                if sink:
                    _scatter(frame.payload or b"", sink)
                frame.payload = None
            self._execute(link, frame)
        self.peer_batch_end(link)


_DATA_FRAMES = frozenset({FrameType.WRITE, FrameType.READ_REQ, FrameType.SEND})
_HEARTBEAT = encode(FrameType.HEARTBEAT)
_REQUESTS = frozenset({FrameType.WRITE, FrameType.SEND, FrameType.READ_REQ})
_RETRIED = _REQUESTS | {FrameType.READ_RESP}
_FAULT_OPS = {
    FrameType.WRITE: "RDMA_WRITE",
    FrameType.READ_REQ: "RDMA_READ",
    FrameType.SEND: "SEND",
    FrameType.READ_RESP: "READ_RESP",
    FrameType.ACK: "ACK",
    FrameType.NAK: "ACK",
    FrameType.HEARTBEAT: "HEARTBEAT",
}


def _fault_view(frame: Frame) -> tuple[str, int | None, int | None, int]:
    """What fault rules match on: operation, sequence number, rmr_context and size."""
    kind = frame.type
    name = _FAULT_OPS.get(kind, "CM")
    seq = frame.fields[0] if name not in ("CM", "HEARTBEAT") else None
    rmr_context = frame.fields[2] if kind in (FrameType.WRITE, FrameType.READ_REQ) else None
    size = frame.fields[3] if kind == FrameType.READ_REQ else frame.payload_len
    return name, seq, rmr_context, size


_MODIFIABLE = frozenset({"pz", "recv_evd", "request_evd", "connect_evd", "attr"})
_ANSWERED = frozenset({Dtos.RDMA_READ, Dtos.BIND_MW})  # done by an answer, not by an ACK
_POST_DTOS = {
    FrameType.POST_SEND: Dtos.SEND,
    FrameType.POST_WRITE: Dtos.RDMA_WRITE,
    FrameType.POST_READ: Dtos.RDMA_READ,
}


T = TypeVar("T")


def _lookup(table: dict[int, T], handle: Any, subtype: DatReturnSubtype, what: str) -> T:
    """The object a consumer's handle names, or DAT_INVALID_HANDLE with ``subtype``."""
    found = table.get(handle) if type(handle) is int else None
    if found is None:
        raise DatInvalidHandle(subtype, f"no {what} {handle!r}")
    return found


def _truncate(views: Sequence[memoryview], length: int) -> list[memoryview]:
    """The front of a scatter list holding exactly ``length`` bytes (front segments filled)."""
    out = []
    for v in views:
        if length <= 0:
            break
        take = min(len(v), length)
        out.append(v[:take])
        length -= take
    return out


def _scatter(data: bytes, sink: Sequence[memoryview]) -> None:
    pos = 0
    for v in sink:
        v[:] = data[pos : pos + len(v)]
        pos += len(v)
