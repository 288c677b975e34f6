"""The NIC's objects (IA, EP, LMR, RMR, PSP/RSP, CR, peer link) and what it asks of its shell.

Plain records: the rooms of the package change them, each its own part (the EP driver alone
writes ``Ep.state``, the CM alone ``PeerLink.cm``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from fabricd.memory import Grant, Lmr, MemoryRegistry, Span
from fabricd.procmem import PlannedWrites
from proto.attrs import EpAttr
from proto.batch import last_seq
from proto.checks import Region
from proto.cm_states import CmState
from proto.codec import Frame
from proto.constants import DatReturnSubtype, Dtos, SrqState
from proto.constants import DtoCompletionStatus as St
from proto.constants import EpState as S
from proto.errors import DatInvalidHandle
from proto.frames import FrameType
from proto.hostif import Ring
from proto.native import View

if TYPE_CHECKING:
    from fabricd.nic.runs import Run


class Channel(Protocol):
    """One stream as the core sees it (a consumer's unix socket or a peer's TCP stream)."""

    def send(self, header: bytes, payload: Sequence[memoryview] = ()) -> None:
        """One frame: its header (or the whole frame: ``codec.encode_framed``), then the views
        of its payload."""

    def close(self, reason: str) -> None: ...

    @property
    def peer_address(self) -> str: ...

    @property
    def peer_pid(self) -> int:
        """The process at the other end of a consumer's socket (0: unknown, or a peer)."""
        ...


class Timer(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None: ...


class Shell(Protocol):
    """The effects the core asks of its I/O shell (or of the in-memory harness)."""

    def connect_peer(self, link: PeerLink, host: str, port: int) -> None: ...

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer: ...

    def call_soon(self, fn: Callable[[], None]) -> None: ...

    def call_next(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in a later iteration of the event loop, which looks for input in between
        (``call_soon`` runs it at the end of this batch)."""
        ...

    def call_idle(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the shell's input is drained (a consumer's wake-up: a NIC's
        interrupt moderation); soon, whatever comes meanwhile."""
        ...

    def crash(self) -> None: ...

    def now(self) -> float: ...


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
    evds: dict[int, EventQueue] = field(default_factory=dict)
    srqs: dict[int, Srq] = field(default_factory=dict)
    polled: dict[int, Ep] = field(default_factory=dict)  # looked at before each call
    closed: bool = False
    pid: int = 0  # the process that opened the IA (its own memory can be registered)
    registered: int = 0  # bytes its VIRTUAL and SHARED_VIRTUAL LMRs cover (proto.limits)
    handed: int = 0  # segments it handed over at the segment desk
    handed_bytes: int = 0  # their bytes (proto.limits ia_bytes)
    admin: bool = False  # an admin connection: admin calls only, no objects


@dataclass(eq=False, slots=True)
class EventQueue:
    """An EVD's event queue in shared memory, as the daemon (its producer) holds it."""

    handle: int
    segment: str
    ring: Ring
    qlen: int  # the EVD's length: more queued events than this overflow it
    overflowed: bool = False
    notified: int = 0  # the last ARM answered (the daemon's copy of NOTIFIED)
    due: bool = False  # a notifying event was written since the last notify check


@dataclass(eq=False, slots=True)
class Op:
    """One posted request DTO (send, RDMA write or read, or a bind) awaiting completion."""

    kind: Dtos
    cookie: int
    flags: int
    seq: int
    length: int
    views: list[memoryview]
    done: bool = False
    spans: list[Span] = field(default_factory=list)  # process memory: fetched, stored
    remote: tuple[int, int, int] = (0, 0, 0)  # the RMR triplet of an RDMA DTO
    status: St = St.DTO_SUCCESS  # done but failed: breaks the connection when retired
    bind: Bind | None = None
    operands: tuple[int, int] = (0, 0)  # an atomic's operand and compare; the immediate data


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
    for_ep: bool = False  # dat_rmr_create_for_ep: its key works only on the EP it is bound to

    def unbind(self, memory: MemoryRegistry) -> None:
        """The window's key stops working (a rebind, dat_rmr_free, or its IA closing)."""
        if self.context:
            memory.unbind(self.context)
        self.context, self.lmr, self.region = 0, None, None


@dataclass(eq=False, slots=True)
class Recv:
    """One posted receive buffer."""

    cookie: int
    flags: int
    views: list[memoryview]
    capacity: int
    spans: list[Span] = field(default_factory=list)  # process memory: stored when filled


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
    ops: deque[Op | Run] = field(default_factory=deque)  # every outstanding request DTO
    held: deque[Op | Run] = field(default_factory=deque)  # posted, not started (fence, credits)
    recvs: deque[Recv] = field(default_factory=deque)
    reads_out: int = 0  # RDMA Read requests sent and not answered
    reads_done: int = 0  # RDMA Read responses received (tells the target its load)
    next_seq: int = 1
    acked: int = 0
    timer: Timer | None = None
    rsp: Listener | None = None
    queues: WorkQueues | None = None
    srq: Srq | None = None  # its receives come from this SRQ (``recvs`` is the SRQ's)
    taking: Recv | None = None  # the receive a message landing now has taken
    remote: tuple[str, int, int] | None = None  # host, port, conn_qual of its last connect
    soft_hw: int = -1  # dat_ep_set_watermark (-1: DAT_WATERMARK_INFINITE); armed once
    hard_hw: int = -1


@dataclass(eq=False)
class Srq:
    """A shared receive queue (dat_srq_create): receives its consumer posts to one ring, taken
    by whichever of its EPs a Send or Write with immediate data arrives on first."""

    handle: int
    consumer: Consumer
    pz: int
    max_recv_iov: int
    segment: str
    ring: Ring
    low_watermark: int = 0
    armed: bool = False  # the low watermark event is due when fewer receives are left
    srq_state: SrqState = SrqState.OPERATIONAL
    recvs: deque[Recv] = field(default_factory=deque)  # taken from the ring, not yet consumed
    eps: dict[int, Ep] = field(default_factory=dict)  # the EPs that take from it
    done: int = 0  # receives completed (the DONE word)
    heard: int = 0  # doorbells taken (the HEARD word)


@dataclass(eq=False, slots=True)
class WorkQueues:
    """An EP's send and receive queue in shared memory, as the daemon (their consumer) holds
    them; the counts are the daemon's own (it never reads back a word it writes)."""

    segment: str
    sq: Ring
    rq: Ring
    stage: View  # the staging area (STAGED WQEs' bytes)
    sq_done: int = 0
    rq_done: int = 0
    heard: int = 0
    bound: int = 0
    polling: bool = False  # the daemon's copy of POLL
    repoll: bool = False  # a look at the end of this loop turn is scheduled
    progress: int = 0  # looks that took WQEs
    linger: Timer | None = None  # POLL kept 1 after an empty look: the look that ends it
    busy_until: float = 0.0  # POLL kept 1 after a retire: looks until then (Intake.retired)...
    busy_looks: int = 0  # ...at most this many more
    look: Callable[[], None] | None = None  # the intake's look at these queues, made once


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
    fired: bool = False  # RSP only: it took its one request and listens no more


@dataclass(eq=False)
class Cr:
    """A connection request waiting for dat_cr_accept or dat_cr_reject."""

    handle: int
    consumer: Consumer
    link: PeerLink
    listener: Listener
    private_data: bytes
    ep: Ep | None = None  # the EP the request carries: its RSP's, or one the provider made


@dataclass(eq=False)
class PeerLink:
    """One daemon-to-daemon stream; it carries exactly one connected EP pair."""

    id: int
    active: bool
    channel: Channel | None = None
    cm: CmState = CmState.IDLE
    ep: Ep | None = None
    cr: Cr | None = None
    hello: bool = False  # the peer's HELLO arrived
    authenticated: bool = False  # both sides proved the cluster key (proto.peer_auth)
    their_hello: str = ""  # the name its HELLO carried
    nonce: bytes = b""  # our challenge
    their_nonce: bytes = b""  # its challenge (the accepting side)
    born: float = 0.0  # when the stream came up
    remote_name: str = ""
    acked: int = 0  # target side: last request sequence number executed
    reads_in: int = 0  # target side: RDMA Read requests received
    ack_due: bool = False
    fault: tuple[int, St] | None = None  # target side: a request refused while its payload drains
    stalled: deque[Frame] = field(default_factory=deque)  # frames held behind an RNR send
    # target side: the WRITES batch landing now goes straight to this process, as planned
    direct: PlannedWrites | None = None  # (remote_access.direct_writes)
    # target side: keys whose checks passed for ``grants_ep`` while ``memory.revoked`` was
    # ``grants_revoked`` (fabricd/nic/lane.py), for Writes and for RDMA Reads
    grants: dict[int, Grant] = field(default_factory=dict)
    readable: dict[int, Grant] = field(default_factory=dict)
    grants_ep: Ep | None = None
    grants_revoked: int = -1
    unsent: list[bytes] = field(default_factory=list)  # CM frames waiting for authentication
    closed: bool = False
    local: bool = False  # both ends in this daemon: no heartbeat needed
    remote_node: str = ""  # the peer daemon's node name
    messages: int = 0  # outgoing messages counted for fault decisions
    delayed: deque[tuple[float, bytes, list[memoryview]]] = field(default_factory=deque)
    busy_until: float = 0.0  # a bandwidth cap: when the link is free again
    release: Timer | None = None
    closing: str = ""  # dropped while a delay held frames: the reason, to close after them
    sent: bool = False  # something was sent since the last tick
    heard: bool = False  # something arrived since the last tick
    last_heard: float = 0.0

    def seen(self, frame: Frame) -> bool:
        """Target side: a request seen before (a duplicated or retried message), which RC
        executes once. (A batch is one when its last request is; one partly seen lands only
        the rest.)"""
        last = last_seq(frame)
        if last <= self.acked:
            return True
        return bool(self.stalled) and any(
            f.fields[0] <= last and frame.fields[0] <= last_seq(f) for f in self.stalled
        )


class Listeners:
    """The node's PSPs and RSPs by conn_qual (one listener per conn_qual)."""

    def __init__(self) -> None:
        self.by_conn_qual: dict[int, Listener] = {}

    def add(self, listener: Listener) -> None:
        """Enter a listener (its conn_qual was checked to be free)."""
        self.by_conn_qual[listener.conn_qual] = listener
        listener.consumer.psps[listener.handle] = listener

    def remove(self, listener: Listener) -> None:
        """Stop listening and forget the handle; an RSP's EP no longer has its RSP."""
        self.stop(listener)
        listener.consumer.psps.pop(listener.handle, None)

    def stop(self, listener: Listener) -> None:
        """Stop listening (an RSP that fired: its handle stays the consumer's until
        dat_rsp_free, which then succeeds, as on OFED's dapl)."""
        if self.by_conn_qual.get(listener.conn_qual) is listener:
            del self.by_conn_qual[listener.conn_qual]
        if listener.ep is not None:
            listener.ep.rsp = None


class Handles:
    """The node's handle numbers: one counter for every kind of object and link."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next


REQUESTS = frozenset(
    {FrameType.WRITE, FrameType.SEND, FrameType.READ_REQ, FrameType.ATOMIC, FrameType.WRITE_IMM}
)
"""Peer frames that carry a request sequence number and are executed once."""

T = TypeVar("T")


def lookup(table: dict[int, T], handle: object, subtype: DatReturnSubtype, what: str) -> T:
    """The object a consumer's handle names, or DAT_INVALID_HANDLE with ``subtype``."""
    found = table.get(handle) if type(handle) is int else None
    if found is None:
        raise DatInvalidHandle(subtype, f"no {what} {handle!r}")
    return found
