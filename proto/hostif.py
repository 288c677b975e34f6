"""The host interface's data path: rings of fixed-size entries in shared memory.

docs/host-interface.md is the contract; this module is its Python reading. A ring is a
single-producer single-consumer queue over a memoryview: a 64-byte descriptor, a producer line
(the producer's index and words), a consumer line (the consumer's index and words), then
``entries`` slots of ``entry_size`` bytes. Indices are free-running u32 counters; slot = index
mod entries (a power of two). Every integer is little-endian.

Each side keeps its own copy of its index and trusts only that copy; the other side's index is
read from memory and checked (``Ring.available``, ``Ring.space``) before any slot is touched,
so garbage written by one side is found, never followed. Pure: no I/O.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from proto.constants import CompletionFlags, Dtos
from proto.errors import ProtocolError

HOSTIF_VERSION: Final = 6
"""Bumped on any change of a layout below; HELLO refuses a driver of another version."""

MAGIC: Final = 0x31514644  # "DFQ1" read as little-endian bytes
LINE: Final = 64
DESCRIPTOR: Final = struct.Struct("<IHHII")  # magic, version, kind, entry_size, entries
PRODUCER_LINE: Final = LINE  # offset of the producer's line
CONSUMER_LINE: Final = 2 * LINE  # offset of the consumer's line
SLOTS: Final = 3 * LINE  # offset of slot 0
MAX_ENTRIES: Final = 1 << 16
ASYNC_EVD: Final = 1
"""The handle of every IA's async EVD (the driver creates its queue right after HELLO)."""
U32: Final = 1 << 32


class RingKind(IntEnum):
    """What a ring carries; the descriptor's kind field."""

    SQ = 1  # send queue: the consumer produces WQEs, the daemon consumes them
    RQ = 2  # receive queue: the same, receive WQEs
    EQ = 3  # event queue of an EVD: the daemon produces events, the consumer takes them
    SRQ = 4  # shared receive queue: the consumer produces receive WQEs for every EP it serves


class Word:
    """The daemon's words on a work queue's consumer line (u32 each, after the index): what a
    driver needs to answer posts synchronously. One writer: the daemon. (Plain int constants,
    not an IntEnum: an enum member costs ~0.2 us to look up, and these are read per post.)"""

    DONE: Final = 4  # WQEs of this queue completed, free-running: outstanding = prod - DONE
    STATE: Final = 8  # the EP's DAT_EP_STATE (on the SQ); the SRQ's DAT_SRQ_STATE (its ring)
    HEARD: Final = 12  # doorbells of this EP (on the SQ) or SRQ the daemon has taken, free-running
    POLL: Final = 16  # 1: the daemon looks at this EP's queues again without a doorbell (SQ)
    BOUND: Final = 20  # RMR binds of this EP completed, free-running (on the SQ)


def word_at(offset: int) -> int:
    """The index in ``Ring.words`` of the consumer line's u32 at ``offset`` (``Word``): a
    driver reads the words a post checks as one subscript each (``Ring.word`` is a call)."""
    return (CONSUMER_LINE + offset) // 4


class RingError(ProtocolError):
    """The other side broke the ring's rules (an index past the ring, running backwards, a
    malformed entry): the daemon closes that IA with this reason."""


def ring_bytes(entries: int, entry_size: int) -> int:
    """The memory a ring of ``entries`` slots of ``entry_size`` bytes takes."""
    return SLOTS + entries * entry_size


def ring_entries(wanted: int) -> int:
    """The slot count for a queue that must hold ``wanted`` entries: a power of two ≥ 2."""
    if not 0 < wanted <= MAX_ENTRIES:
        raise ValueError(f"a ring holds 1 to {MAX_ENTRIES} entries, not {wanted}")
    return max(2, 1 << (wanted - 1).bit_length())


if sys.byteorder != "little":  # the words below are accessed in native order
    raise ImportError("the host interface is little-endian; this machine is not")


def u32(view: memoryview, offset: int) -> int:
    """A u32 of the shared memory, as one aligned 4-byte load (never torn: ``struct`` with an
    explicit byte order moves one byte at a time, so the other side could see half a store)."""
    value: int = view[offset : offset + 4].cast("I")[0]
    return value


def set_u32(view: memoryview, offset: int, value: int) -> None:
    """Store a u32 into the shared memory as one aligned 4-byte store."""
    view[offset : offset + 4].cast("I")[0] = value & (U32 - 1)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a ring lives: the segment, the offset of its descriptor, its geometry."""

    segment: str
    offset: int
    entries: int
    entry_size: int

    @property
    def size(self) -> int:
        return ring_bytes(self.entries, self.entry_size)


def format_ring(view: memoryview, kind: RingKind, entries: int, entry_size: int) -> None:
    """Write a new ring's descriptor and zero its lines (the creator does this once)."""
    view[:SLOTS] = bytes(SLOTS)
    DESCRIPTOR.pack_into(view, 0, MAGIC, HOSTIF_VERSION, kind, entry_size, entries)


def check_descriptor(view: memoryview, kind: RingKind, entries: int, entry_size: int) -> None:
    """A driver's check of a ring the daemon placed: the descriptor says what the reply said."""
    got = DESCRIPTOR.unpack_from(view, 0)
    if got != (MAGIC, HOSTIF_VERSION, kind, entry_size, entries):
        raise RingError(f"ring descriptor {got!r} is not a version {HOSTIF_VERSION} {kind.name}")


class Ring:
    """One side's handle on a ring: ``producer`` True for the side that fills it."""

    __slots__ = (
        "entries",
        "entry_size",
        "mask",
        "mine",
        "mine_at",
        "producer",
        "theirs_at",
        "view",
        "words",
    )

    def __init__(self, view: memoryview, entries: int, entry_size: int, producer: bool) -> None:
        if entries & (entries - 1) or not 0 < entries <= MAX_ENTRIES:
            raise ValueError(f"entries must be a power of two ≤ {MAX_ENTRIES}")
        if len(view) < ring_bytes(entries, entry_size):
            raise ValueError("the view is smaller than the ring")
        self.view = view
        self.entries, self.entry_size, self.mask = entries, entry_size, entries - 1
        self.producer = producer
        self.words = view[:SLOTS].cast("I")  # the lines as u32s: whole-word loads and stores
        self.mine_at = (PRODUCER_LINE if producer else CONSUMER_LINE) // 4
        self.theirs_at = (CONSUMER_LINE if producer else PRODUCER_LINE) // 4
        self.mine: int = self.words[self.mine_at]

    def slot(self, index: int) -> int:
        """The byte offset of the slot of ``index``."""
        return SLOTS + (index & self.mask) * self.entry_size

    def _theirs(self) -> int:
        """The other side's index, checked: it may only lie within one ring of ours."""
        theirs: int = self.words[self.theirs_at]
        ahead = (theirs - self.mine) % U32 if not self.producer else (self.mine - theirs) % U32
        if ahead > self.entries:
            raise self._beyond(theirs, ahead)
        return theirs

    def _beyond(self, theirs: int, ahead: int) -> RingError:
        side = "producer" if not self.producer else "consumer"
        return RingError(
            f"the {side} index {theirs} is {ahead} entries from {self.mine}: "
            "past the ring or running backwards"
        )

    def available(self) -> int:
        """Consumer: how many entries are ready to take (``_theirs``' check, inline: the
        daemon's empty look reads two of these)."""
        if self.producer:
            return (self._theirs() - self.mine) % U32
        theirs: int = self.words[self.theirs_at]
        ready: int = (theirs - self.mine) % U32
        if ready > self.entries:
            raise self._beyond(theirs, ready)
        return ready

    def space(self) -> int:
        """Producer: how many slots are free (``_theirs``' check, inline: every completion run
        asks)."""
        if not self.producer:
            return self.entries - (self.mine - self._theirs()) % U32
        theirs: int = self.words[self.theirs_at]
        used: int = (self.mine - theirs) % U32
        if used > self.entries:
            raise self._beyond(theirs, used)
        return self.entries - used

    def publish(self, count: int = 1) -> None:
        """Advance this side's index by ``count`` and store it (after the slots are written or
        read: the store is the release of those slots to the other side)."""
        self.mine = (self.mine + count) % U32
        self.words[self.mine_at] = self.mine

    def get(self, at: int) -> int:
        """The u32 at byte offset ``at`` of the lines (``EqWord``)."""
        value: int = self.words[at // 4]
        return value

    def put(self, at: int, value: int) -> None:
        """Store the u32 at byte offset ``at`` of the lines (only that word's writer does)."""
        self.words[at // 4] = value % U32

    def word(self, offset: int) -> int:
        """A u32 of this ring's consumer line (``Word`` offsets)."""
        value: int = self.words[(CONSUMER_LINE + offset) // 4]
        return value

    def set_word(self, offset: int, value: int) -> None:
        """Store a u32 of the consumer line (only its writer, the consumer side, does)."""
        self.words[(CONSUMER_LINE + offset) // 4] = value % U32


# -- work queue entries (SQ and RQ) ----------------------------------------------------------


class Opcode(IntEnum):
    """A WQE's opcode; 0 is never valid (a zeroed slot is garbage)."""

    SEND = 1
    RDMA_WRITE = 2
    RDMA_READ = 3
    RECEIVE = 4
    FETCH_ADD = 5  # dat_ib_post_fetch_and_add: operand is the value added
    CMP_SWAP = 6  # dat_ib_post_cmp_and_swap: compare, then operand is the value swapped in
    RDMA_WRITE_IMM = 7  # dat_ib_post_rdma_write_immed: operand is the 32-bit immediate data


OPCODE_DTOS: Final = {
    Opcode.SEND: Dtos.SEND,
    Opcode.RDMA_WRITE: Dtos.RDMA_WRITE,
    Opcode.RDMA_READ: Dtos.RDMA_READ,
    Opcode.RECEIVE: Dtos.RECEIVE,
    Opcode.FETCH_ADD: Dtos.IB_FETCH_ADD,
    Opcode.CMP_SWAP: Dtos.IB_CMP_SWAP,
    Opcode.RDMA_WRITE_IMM: Dtos.IB_RDMA_WRITE_IMMED,
}
DTOS_OPCODE: Final = {dtos: op for op, dtos in OPCODE_DTOS.items()}
_OPCODES: Final = {int(op): op for op in OPCODE_DTOS}  # a dict lookup: Opcode(n) costs ~0.5 us

WQE: Final = struct.Struct("<BBHIQQQIIQQ8x")
"""opcode, wqe flags (``STAGED``), num_segments, completion_flags, cookie, remote
virtual_address, remote length, remote rmr_context, stage offset (0 unless STAGED), operand,
compare (the IB extensions' values: 0 for the other opcodes), reserved (0); 64 bytes, then the
segments."""
ATOMIC_BYTES: Final = 8
"""An atomic acts on 8 bytes at an 8-byte aligned remote address, and returns the original
value into one local segment of exactly 8 bytes."""
STAGED: Final = 0x01
"""WQE flag: the bytes to send were copied into the EP's staging area at the stage offset when
the WQE was posted (SEND and RDMA_WRITE without BARRIER_FENCE only); the segments still name
where they came from, and are checked as always."""
STAGE_BYTES: Final = 4 << 20
"""The staging area: where a driver whose registered memory the daemon does not map copies
the bytes of an unfenced SEND or RDMA_WRITE when it posts it (``STAGED``), so the daemon sends
them from shared memory instead of reading the process; the driver reuses them once the WQE's
completion is counted in DONE."""
_STAGEABLE: Final = frozenset({Opcode.SEND, Opcode.RDMA_WRITE, Opcode.RDMA_WRITE_IMM})
_FENCE: Final = int(CompletionFlags.BARRIER_FENCE)  # a plain int: IntFlag operators are slow
SEGMENT: Final = struct.Struct("<QQI4x")
"""A local segment: virtual_address, length, lmr_context, reserved (0); 24 bytes."""
WQE_ONE: Final = struct.Struct(WQE.format + SEGMENT.format[1:])
"""A WQE and its first segment, read or written in one call (every slot has room for both)."""


def wqe_size(max_iov: int) -> int:
    """The slot size of a work queue whose WQEs carry up to ``max_iov`` segments (a multiple of
    the 64-byte line)."""
    raw = WQE.size + SEGMENT.size * max(max_iov, 1)
    return -(-raw // LINE) * LINE


@dataclass(slots=True)
class Wqe:
    """A work request as read from a slot (not frozen: a frozen dataclass's __init__ costs
    ~1 us, this one's ~0.2 us, once per WQE the daemon takes)."""

    opcode: Opcode
    flags: int
    cookie: int
    segments: tuple[tuple[int, int, int], ...]  # (virtual_address, length, lmr_context)
    remote: tuple[int, int, int]  # (virtual_address, length, rmr_context); zeros for SEND/RECV
    stage: int | None = None  # STAGED: where its bytes start in the EP's staging area
    operands: tuple[int, int] = (0, 0)  # (operand, compare) of the IB extension opcodes


def write_wqe(
    ring: Ring,
    opcode: Opcode,
    flags: int,
    cookie: int,
    segments: Sequence[Sequence[int]],
    remote: tuple[int, int, int] = (0, 0, 0),
    stage: int | None = None,
    operands: tuple[int, int] = (0, 0),
) -> None:
    """Producer: fill the next slot (the caller checked ``space`` and publishes; ``stage``: the
    bytes are in the staging area there; ``operands``: an IB extension's operand, compare)."""
    at = ring.slot(ring.mine)
    view = ring.view
    wqe_flags, offset = (0, 0) if stage is None else (STAGED, stage)
    n = len(segments)
    if n == 1:  # the common post: header and segment in one pack
        WQE_ONE.pack_into(
            view, at, opcode, wqe_flags, 1, flags, cookie, *remote, offset, *operands, *segments[0]
        )
        return
    WQE.pack_into(view, at, opcode, wqe_flags, n, flags, cookie, *remote, offset, *operands)
    at += WQE.size
    for address, length, context in segments:
        SEGMENT.pack_into(view, at, address, length, context)
        at += SEGMENT.size


def read_wqe(ring: Ring, index: int, max_iov: int) -> Wqe:
    """Consumer: the WQE in the slot of ``index``, checked for shape (RingError if garbage)."""
    at, view = ring.slot(index), ring.view
    # one unpack for the header and the first segment (every slot has room for both)
    (
        raw_op,
        wqe_flags,
        count,
        flags,
        cookie,
        r_addr,
        r_len,
        r_ctx,
        offset,
        operand,
        compare,
        address,
        length,
        context,
    ) = WQE_ONE.unpack_from(view, at)
    opcode = _OPCODES.get(raw_op)
    if opcode is None or wqe_flags & ~STAGED or (offset and not wqe_flags):
        raise RingError(f"WQE {index}: opcode {raw_op} or reserved bytes are not valid")
    if (operand or compare) and not _operands_fit(opcode, operand, compare):
        raise RingError(f"WQE {index}: {opcode.name} does not take operands {operand}, {compare}")
    if count > max_iov:
        raise RingError(f"WQE {index}: {count} segments, the queue takes {max_iov}")
    if count == 1:  # the common case, without a generator
        segments: tuple[tuple[int, int, int], ...] = ((address, length, context),)
    else:
        at, step = at + WQE.size, SEGMENT.size
        segments = tuple(SEGMENT.unpack_from(view, at + i * step) for i in range(count))
    if not wqe_flags:
        remote = (r_addr, r_len, r_ctx)
        return Wqe(opcode, flags, cookie, segments, remote, None, (operand, compare))
    if opcode not in _STAGEABLE or flags & _FENCE:
        raise RingError(f"WQE {index}: only an unfenced SEND or RDMA Write is staged")
    staged = length if count == 1 else sum(n for _, n, _ in segments)
    if offset + staged > STAGE_BYTES:
        raise RingError(f"WQE {index}: its staged bytes run past the staging area")
    return Wqe(opcode, flags, cookie, segments, (r_addr, r_len, r_ctx), offset, (operand, 0))


def _operands_fit(opcode: Opcode, operand: int, compare: int) -> bool:
    """Which opcodes carry which operands: the atomics two u64s (fetch-and-add no compare),
    a Write with immediate data 32 bits; the others none."""
    if opcode == Opcode.CMP_SWAP:
        return True
    if opcode == Opcode.FETCH_ADD:
        return not compare
    return opcode == Opcode.RDMA_WRITE_IMM and not compare and operand < U32
