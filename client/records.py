"""The consumer core's records (client.core): a call to the daemon, an event, an EVD and the
mirror of an EP as the driver keeps them, and what dat_cr_query and dat_lmr_create answer."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from proto.attrs import EpAttr
from proto.calls import METHODS
from proto.constants import EpState, EvdFlags, EventNumber, IbExtType, MemPriv, RmrScope
from proto.eventq import EqWord
from proto.hostif import U32, Ring, Word, word_at
from proto.schema import Empty

POLL_SPIN_US = 1000  # dat_evd_wait polls this long before sleeping (the C driver's DF_POLL_SPIN_US)
POLL_BULK = 16384  # ...unless the EVD's DTO completions average this many bytes (DF_POLL_BULK)


def mean_step(mean: int, length: int) -> int:
    """The running mean of an EVD's DTO completion lengths (``EvdState.dto_bytes``), weight
    1/8, one completion on: it moves at least one byte toward ``length``, so completions all
    of one length bring it to that length (a step rounded toward the old mean stops up to 7
    short, and POLL_BULK-byte completions never counted as bulk). client/_ringtake.c's and
    libdatfabric's (provider/evd_take.c) are the same."""
    d = length - mean
    return mean + (d + 7) // 8 if d >= 0 else mean + d // 8


_DONE_AT: Final = word_at(Word.DONE)  # where EpMirror reads the daemon's counts
_BOUND_AT: Final = word_at(Word.BOUND)


@dataclass(frozen=True, slots=True)
class Call:
    """One request to the daemon: a method name and its argument record (proto.calls)."""

    method: str
    args: Sequence[object] = Empty()

    @property
    def moves_ep(self) -> bool:
        """The result ends with ``ep, state``: the endpoint's state after the call."""
        return METHODS[self.method].moves_ep


Op = Generator[Call, Any, Any]


@dataclass
class Event:
    """A DAT_EVENT: the number, the EVD it was queued on, and the fields of its kind. (No
    __slots__: a field never set reads its class default, which client._ringtake relies on:
    it sets a DTO completion's own fields only.)"""

    event_number: EventNumber
    evd: int
    ep: int = 0
    cookie: int = 0
    status: int = 0
    transfered_length: int = 0
    operation: int = 0
    private_data: bytes = b""
    sp: int = 0
    conn_qual: int = 0
    cr: int = 0
    remote_address: str = ""
    handle: int = 0
    reason: int = 0
    pointer: Any = None
    """For SOFTWARE_EVENT: what dat_evd_post_se was given."""
    notify: bool = True
    """False for an UNSIGNALLED completion: it is queued but wakes no waiter."""
    cr_handle: Any = field(default=None, compare=False, repr=False)
    """For CONNECTION_REQUEST: the CR object of the API that returned the event."""
    ext_type: IbExtType | None = None
    """For IB_DTO_EVENT: DAT_IB_EXTENSION_EVENT_DATA's type (what completed)."""
    immed_data: int = 0
    """For IB_DTO_EVENT of type RDMA_WRITE_IMMED_DATA: the 32-bit immediate data."""
    srq: int = field(default=0, compare=False, repr=False)
    """For a receive taken from an SRQ: the SRQ's handle (its count of receives handed out)."""


@dataclass(eq=False)
class EvdState:
    """An event dispatcher: its event queue in shared memory (the daemon writes it) and the
    events already read from there but not yet handed out, oldest first."""

    handle: int
    qlen: int
    flags: EvdFlags
    queue: deque[Event] = field(default_factory=deque)
    ring: Ring | None = None  # consumer side, once the daemon placed it
    from_ring: int = 0  # the first ``from_ring`` events of ``queue`` still hold their slot
    waiting: bool = False  # a dat_evd_wait is in progress (one waiter at a time)
    cno: int = 0
    notifying: int = 0  # queued events that notify (all but UNSIGNALLED completions)
    armed: int = 0  # the driver's copy of ARM
    enabled: bool = True  # dat_evd_disable: its events wake no CNO waiter
    waitable: bool = True  # dat_evd_set_unwaitable: dat_evd_wait refuses
    dto_bytes: int = 0  # the running mean of its DTO completions' transferred lengths

    @property
    def spin(self) -> float:
        """Seconds dat_evd_wait polls the ring before it arms and sleeps: small transfers
        complete within one round trip of the daemons, which a sleep and a NOTIFY would double;
        bulk ones keep the daemons copying, and a spinner would take their core; other events
        (connections, requests) come when they come (libdatfabric's spins())."""
        if not self.flags & EvdFlags.DTO or self.dto_bytes >= POLL_BULK:
            return 0.0
        return POLL_SPIN_US / 1e6

    @property
    def overflowed(self) -> bool:
        """The daemon found the queue full and lost an event (DAT_ASYNC_ERROR_EVD_OVERFLOW)."""
        return self.ring is not None and self.ring.get(EqWord.OVERFLOW) != 0

    def push(self, event: Event) -> None:
        """Queue an event made here (not from the ring: IA_CATASTROPHIC)."""
        self.queue.append(event)
        self.notifying += event.notify

    def pop(self) -> Event:
        """Take the oldest event; an entry of the ring frees its slot."""
        event = self.queue.popleft()
        self.notifying -= event.notify
        if self.from_ring:
            self.from_ring -= 1
            ring = self.ring
            assert ring is not None
            ring.mine = mine = (ring.mine + 1) % U32  # ring.publish(), inline: once an event
            ring.words[ring.mine_at] = mine
        return event

    def ready(self, threshold: int) -> bool:
        """Would a waiter wake: ``threshold`` events, at least one of them a notification?
        (Read the ring first: ClientCore.refill.)"""
        return len(self.queue) >= threshold and self.notifying > 0

    def arm(self, threshold: int) -> None:
        """Ask for a NOTIFY frame once ``threshold`` events are queued (before sleeping; the
        caller fences, then looks at the ring once more)."""
        ring = self.ring
        if ring is None:
            return
        ring.put(EqWord.WANT, threshold)
        if ring.get(EqWord.NOTIFIED) == self.armed:
            self.armed = (self.armed + 1) % U32
            ring.put(EqWord.ARM, self.armed)


@dataclass(eq=False)
class EpMirror:
    """What the consumer knows of an endpoint, enough to answer posts synchronously."""

    handle: int
    pz: int
    recv_evd: int
    request_evd: int
    connect_evd: int
    attr: EpAttr
    known: EpState = EpState.UNCONNECTED  # the state before the queues are mapped
    binds: int = 0  # RMR binds made (they leave as calls, not WQEs), against BOUND
    sq: Ring | None = None  # the work queues, once mapped (producer side)
    rq: Ring | None = None
    rung: int = 0  # doorbells sent (free-running), against the daemon's HEARD
    kicked: tuple[int, int] = (0, 0)  # (sq, rq) producer indices of the last kick
    srq: int = 0  # the SRQ its receives come from (dat_ep_create_with_srq), or 0
    fast: tuple[Any, ...] | None = None
    """What client._ringpost's post reads of the EP (Posting.snapshot): made when the queues
    are mapped, dropped when they or the PZ and attributes change."""

    @property
    def requests(self) -> int:
        """Outstanding request DTOs: WQEs not yet completed, and binds."""
        sq = self.sq
        if sq is None:
            return 0
        words = sq.words
        binds = (self.binds - words[_BOUND_AT]) % U32
        return (sq.mine - words[_DONE_AT]) % U32 + (binds if binds < U32 // 2 else 0)

    @property
    def recvs(self) -> int:
        """Outstanding receives."""
        rq = self.rq
        return 0 if rq is None else (rq.mine - rq.words[_DONE_AT]) % U32

    def param(self, ia: object) -> dict[str, Any]:
        """dat_ep_query's DAT_EP_PARAM: state, PZ, EVDs and the attributes (``ia``: the IA
        object of the API that asks)."""
        return {
            "ia": ia,
            "ep_state": self.state,
            "pz": self.pz,
            "recv_evd": self.recv_evd,
            "request_evd": self.request_evd,
            "connect_evd": self.connect_evd,
            "ep_attr": replace(self.attr),  # a copy: the mirror changes by dat_ep_modify only
            "srq": self.srq,  # DAT_EP_PARAM srq_handle: 0 for an EP with receives of its own
        }

    def status(self) -> tuple[EpState, bool, bool]:
        """dat_ep_get_status: (state, recv_idle, request_idle)."""
        return self.state, self.recvs == 0, self.requests == 0

    @property
    def state(self) -> EpState:
        """The EP's state as the daemon published it (what the client knew, until the queues
        are mapped)."""
        if self.sq is None:
            return self.known
        try:
            return EpState(self.sq.word(Word.STATE))
        except ValueError:
            return self.known

    @state.setter
    def state(self, value: EpState) -> None:
        self.known = value


class QueueMapper(Protocol):
    """How a driver maps the daemon's shared-memory segments (client.shm.QueueMaps)."""

    def map(self, name: str) -> memoryview: ...

    def unmap(self, name: str) -> None: ...

    def fence(self) -> None: ...


@dataclass(frozen=True, slots=True)
class CrInfo:
    """dat_cr_query's answer: who asked, on which conn_qual, with which private data."""

    handle: int
    sp: int
    conn_qual: int
    remote_address: str
    private_data: bytes
    ep: int


@dataclass(frozen=True, slots=True)
class LmrInfo:
    """dat_lmr_create's outputs (and dat_lmr_query's answer)."""

    handle: int
    lmr_context: int
    rmr_context: int
    registered_size: int
    registered_address: int
    pz: int
    privileges: MemPriv


class WindowState:
    """What an RMR handle of either API knows of its binding: the bound range's triplet for a
    peer (``remote``) and dat_rmr_query's answer. The handle class supplies bind and free."""

    def __init__(self, pz: object, for_ep: bool = False) -> None:
        self.pz = pz
        self.scope = RmrScope.EP if for_ep else RmrScope.PZ  # dat_rmr_create_for_ep: EP
        self.lmr: object | None = None
        self.target: list[int] = [0, 0, 0]
        self.privileges = 0
        self.rmr_context = 0

    def _bound(self, lmr: object | None, lmr_triplet: Sequence[int], privileges: int,
               context: int) -> int:  # fmt: skip
        self.lmr, self.privileges, self.rmr_context = lmr, privileges, context
        self.target = [int(lmr_triplet[0]), int(lmr_triplet[1]), context]
        return context

    def remote(self, offset: int = 0, length: int | None = None) -> list[int]:
        """The RMR triplet a peer needs to reach (part of) the bound window."""
        address, size, context = self.target
        return [address + offset, size - offset if length is None else length, context]

    def query(self) -> dict[str, Any]:
        """dat_rmr_query: PZ, LMR, bound range, privileges, current context and scope."""
        return {
            "pz": self.pz,
            "lmr": self.lmr,
            "lmr_triplet": self.target[:2],
            "mem_privileges": self.privileges,
            "rmr_context": self.rmr_context,
            "rmr_scope": self.scope,
        }
