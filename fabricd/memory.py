"""Registered memory as the simulated NIC sees it: LMRs, their keys, remote-access checks.

Pure: segments are mapped by an injected SegmentMapper, a process's own memory is reached through
an injected ProcessMemory, keys come from an injected random source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fabricd import _landing as landing
from fabricd.procmem import NoProcessMemory, Piece, PlannedWrites, ProcessMemory, Scatter
from proto.checks import Region
from proto.constants import MemPriv
from proto.native import View

REMOTE_PRIVS = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE


class SegmentMapper(Protocol):
    """Maps a consumer's shared-memory segment by name (the shell supplies the real one)."""

    def map(self, name: str) -> memoryview: ...

    def unmap(self, name: str) -> None: ...

    def remove(self, name: str) -> None: ...

    def create(self, name: str, size: int) -> int: ...

    def shadow(self, name: str) -> memoryview: ...

    def fence(self) -> None: ...


@dataclass(eq=False, slots=True)
class Lmr:
    """One registered LMR (dat_lmr_create)."""

    handle: int
    owner: int
    region: Region
    segment: str
    view: View  # exactly the registered range
    lmr_context: int
    rmr_context: int
    offset: int = 0  # of the registered range in its segment
    io: memoryview | None = None  # noncoherent mode: the I/O view RDMA reaches
    bound_rmrs: int = 0
    cookie: bytes | None = None  # SHARED_VIRTUAL
    pid: int = 0  # a process's own memory (view: the daemon's mirror of it); 0: a segment
    counted: int = 0  # bytes it adds to its IA's registered total (an LMR over an LMR: 0)
    freed: bool = False  # dat_lmr_free'd: a receive posted into it before then cannot land
    walk_key: tuple[int | View, ...] | None = None  # what _plaintake.c's checks read, kept

    @property
    def target(self) -> memoryview:
        """What remote RDMA reaches: the I/O view when memory is not coherent, else the bytes."""
        return self.io if self.io is not None else self.view

    def local(self, address: int, length: int) -> memoryview:
        """The bytes of [address, address+length) (already checked to lie inside)."""
        off = address - self.region.address
        return self.view[off : off + length]


Span = tuple[Lmr, int, int]
"""(LMR, address, length): part of an LMR that a DTO reads or writes."""


Grant = tuple[int, int, int, View, int]
"""A Reach as the target's lanes read it (fabricd/_lanes.c: the Write lane lands under it,
lane.grant; the Read lane answers from it, lane.read_grants): its range's start and end, its
LMR's first address (origin), the LMR's target bytes, the pid of a process's memory (0: a
segment). Items of a tuple, where a Reach's attributes took a look-up each (five a Write)."""


class Reach:
    """A remote key that passed its checks: the range it opens, in the LMR under it."""

    __slots__ = ("end", "lmr", "origin", "pid", "start", "target")

    def __init__(self, region: Region, lmr: Lmr) -> None:
        self.lmr = lmr
        self.start, self.end = region.address, region.address + region.length
        self.origin = lmr.region.address  # the address of the LMR's first byte
        self.target = lmr.target  # what remote RDMA reaches in it
        self.pid = lmr.pid  # a process's own memory: the target is its mirror

    def grant(self) -> Grant:
        """What the target's lanes read of this key in C (fabricd/_lanes.c)."""
        return self.start, self.end, self.origin, self.target, self.pid

    def covers(self, address: int, length: int) -> bool:
        """Does the key's range hold [address, +length)?"""
        return self.start <= address and address + length <= self.end

    def bytes(self, address: int, length: int) -> memoryview | None:
        """The target bytes of [address, +length), or None outside the key's range."""
        if length == 0:
            return self.lmr.view[0:0]
        if not self.covers(address, length):
            return None
        off = address - self.origin
        return self.target[off : off + length]


@dataclass(eq=False, slots=True)
class Window:
    """A bound RMR: its own range, privileges and PZ over part of an LMR (dat_rmr_bind)."""

    region: Region
    lmr: Lmr
    ep: int = 0  # an RMR of EP scope (dat_rmr_create_for_ep): the EP it is bound to


class MemoryRegistry:
    """LMRs by local and remote key; every remote access is checked here."""

    def __init__(
        self,
        mapper: SegmentMapper,
        random_u32: Callable[[], int],
        coherent: bool = True,
        process: ProcessMemory | None = None,
    ) -> None:
        self._mapper = mapper
        self.fence: Callable[[], None] = mapper.fence
        """A full memory barrier between our stores to shared memory and our next loads (the
        mapper's own: one call on the intake's empty look)."""
        self._process = process or NoProcessMemory()
        self.put_process = self._process.put  # the lane's way into a process (lane.land)
        self.coherent = coherent
        self._random_u32 = random_u32
        self.by_lmr_context: dict[int, Lmr] = {}
        self.by_rmr_context: dict[int, Lmr | Window] = {}
        self._reserved: set[int] = set()
        self._written: dict[str, list[tuple[int, int]]] = {}  # segment -> I/O-view ranges
        self.owners: dict[str, int] = {}  # segment -> the consumer it belongs to (0: the node)
        self.revoked = 0  # keys that stopped working (free, unbind, revoke): a plan checks it

    def new_key(self) -> int:
        """A fresh non-zero 32-bit key not in use as a local or remote context."""
        while True:
            key = self._random_u32() & 0xFFFFFFFF
            if (
                key
                and key not in self.by_lmr_context
                and key not in self.by_rmr_context
                and (key not in self._reserved)
            ):
                return key

    def reserve_key(self) -> int:
        """A remote key promised now (dat_rmr_bind returns it) and bound later."""
        key = self.new_key()
        self._reserved.add(key)
        return key

    def bind(self, key: int, window: Window) -> None:
        """Make a reserved key reach ``window`` (the bind executes)."""
        self._reserved.discard(key)
        self.by_rmr_context[key] = window
        window.lmr.bound_rmrs += 1

    def unbind(self, key: int) -> None:
        """A window's key stops working: later accesses are protection errors."""
        self._reserved.discard(key)
        self.revoked += 1
        entry = self.by_rmr_context.pop(key, None)
        if isinstance(entry, Window):
            entry.lmr.bound_rmrs -= 1

    def revoke(self, key: int) -> bool:
        """A remote key stops working, whatever it opens (an LMR's or a bound window's: the
        admin plane's revoke); False if there is no such key."""
        entry = self.by_rmr_context.get(key)
        if entry is None:
            return False
        if isinstance(entry, Window):
            self.unbind(key)
        else:
            self.revoked += 1  # as unbind and free count theirs: a plan made before fails
            del self.by_rmr_context[key]
        return True

    def map_segment(self, name: str) -> memoryview:
        """Map a consumer's segment; raises OSError or ValueError on a bad name."""
        return self._mapper.map(name)

    def unmap_segment(self, name: str) -> None:
        """Drop one mapping reference taken by map_segment."""
        self._mapper.unmap(name)

    def create_segment(self, name: str, size: int, owner: int = 0) -> int:
        """Create (or find) a segment of at least ``size`` bytes, ``owner``'s (a consumer id;
        0: the node's); returns its size."""
        size = self._mapper.create(name, size)
        self.owners[name] = owner
        return size

    def adopt(self, name: str, owner: int) -> None:
        """A segment the shell took over from consumer ``owner`` (the Python client's arena)."""
        self.owners[name] = owner

    def remove_segment(self, name: str) -> None:
        """Delete a segment (it goes once nothing maps it)."""
        self.owners.pop(name, None)
        self._mapper.remove(name)

    def remove_owned(self, owner: int) -> None:
        """The consumer went away: every segment it owned goes."""
        for name in [n for n, o in self.owners.items() if o == owner]:
            self.remove_segment(name)

    def register(
        self,
        handle: int,
        owner: int,
        region: Region,
        segment: str,
        view: memoryview,
        offset: int = 0,
    ) -> Lmr:
        """Enter an LMR; an rmr_context exists only when remote privileges were asked for."""
        lmr_context = self.new_key()
        rmr_context = 0
        while region.privileges & REMOTE_PRIVS and rmr_context in (0, lmr_context):
            rmr_context = self.new_key()
        lmr = Lmr(handle, owner, region, segment, view, lmr_context, rmr_context, offset)
        if not self.coherent:
            # registration is a synchronisation point: the I/O view starts as the CPU view
            lmr.io = self._mapper.shadow(segment)[offset : offset + region.length]
            lmr.io[:] = view
        self.by_lmr_context[lmr_context] = lmr
        if rmr_context:
            self.by_rmr_context[rmr_context] = lmr
        return lmr

    def register_process(self, handle: int, owner: int, region: Region, pid: int) -> Lmr:
        """Enter an LMR over process ``pid``'s own bytes [region.address, +length); raises
        OSError when they cannot be read. The mirror starts as a copy of them."""
        view = memoryview(bytearray(region.length))
        self._process.read(pid, [(region.address, view)])
        lmr = self.register(handle, owner, region, "", view)
        lmr.pid = pid
        return lmr

    def fetch(self, spans: Sequence[Span]) -> bool:
        """Bring the process's current bytes of ``spans`` into their mirrors (before they are
        sent or served); False if a process's memory could not be read."""
        return self._through(spans, self._process.read)

    def store(self, spans: Sequence[Span]) -> bool:
        """Put the mirrors' bytes of ``spans`` into the process (after they landed, before
        anyone is told); False if a process's memory could not be written."""
        return self._through(spans, self._process.write)

    @staticmethod
    def _through(spans: Sequence[Span], move: Callable[[int, Sequence[Piece]], None]) -> bool:
        """Move the spans of each process together: the spans of one LMR merged where they
        overlap or touch (a batch of Writes into one buffer: one piece; the mirror holds the
        bytes the last of them left), every process's pieces in one system call. False, and
        nothing moved, if an LMR of the spans was freed since they were taken (a receive
        posted before its dat_lmr_free: its mirror is gone, as the NIC's key would be)."""
        ranges: dict[Lmr, list[tuple[int, int]]] = {}
        for lmr, address, length in spans:
            if lmr.freed:
                return False
            if lmr.pid and length:
                ranges.setdefault(lmr, []).append((address, address + length))
        pieces: dict[int, list[Piece]] = {}
        for lmr, some in ranges.items():
            out = pieces.setdefault(lmr.pid, [])
            out += [(start, lmr.local(start, end - start)) for start, end in landing.merge(some)]
        try:
            for pid, some_pieces in pieces.items():
                move(pid, some_pieces)
        except OSError:
            return False
        return True

    def store_payload(self, plan: PlannedWrites, payload: bytes | bytearray | memoryview) -> bool:
        """Write the planned pieces of ``payload`` into the process (a batch of RDMA Writes
        straight from the bytes that came, no mirror in between). False, and nothing written,
        if a key was revoked since the plan was made (its payload may have been arriving
        meanwhile): the caller lands the batch through its checks again; False too if a piece
        could not be written (those before it may have been)."""
        return plan.revoked == self.revoked and self.write_payload(plan.pid, plan.pieces, payload)

    def write_payload(
        self, pid: int, pieces: list[Scatter], payload: bytes | bytearray | memoryview
    ) -> bool:
        """Write the ``pieces`` of ``payload`` into process ``pid`` (checked just now: a run of
        Sends into its receives); False if a piece could not be written (those before it may
        have been)."""
        try:
            source = payload if type(payload) is bytearray else bytearray(payload)
            self._process.scatter(pid, source, pieces)  # ctypes: writable buffers
        except OSError:
            return False
        return True

    def remote_spans(self, rmr_context: int, address: int, length: int) -> list[Span]:
        """The span a checked remote access touches, if it is a process's memory."""
        lmr = self.process_lmr(rmr_context)
        return [(lmr, address, length)] if lmr is not None and length else []

    def process_lmr(self, rmr_context: int) -> Lmr | None:
        """The LMR under a remote key when it is a process's own memory, else None."""
        entry = self.by_rmr_context.get(rmr_context)
        lmr = entry if isinstance(entry, Lmr) or entry is None else entry.lmr
        return lmr if lmr is not None and lmr.pid else None

    def free(self, lmr: Lmr) -> None:
        """Forget an LMR: its keys stop working at once (dat_lmr_free)."""
        self.revoked += 1
        lmr.freed = True
        self.by_lmr_context.pop(lmr.lmr_context, None)
        if lmr.rmr_context:
            self.by_rmr_context.pop(lmr.rmr_context, None)
        lmr.view.release()
        if lmr.io is not None:
            lmr.io.release()

    def remote(
        self, rmr_context: int, address: int, length: int, need: MemPriv, pz: int, ep: int = 0
    ) -> memoryview | None:
        """The target bytes of a remote access through EP ``ep``, or None if the key,
        privilege, PZ, range or (an EP-scope window's) EP fails."""
        reach = self.reach(rmr_context, need, pz, ep)
        return None if reach is None else reach.bytes(address, length)

    def reach(self, rmr_context: int, need: MemPriv, pz: int, ep: int = 0) -> Reach | None:
        """What a key lets EP ``ep`` reach with privilege ``need`` (the checks of ``remote``
        but the range, once for a batch of Writes under one key), or None."""
        entry = self.by_rmr_context.get(rmr_context)
        if entry is None:
            return None
        if type(entry) is Window and entry.ep and entry.ep != ep:
            return None
        region = entry.region
        if not int(region.privileges) & int(need) or region.pz != pz:  # ints: Flag ops are slow
            return None
        lmr = entry if isinstance(entry, Lmr) else entry.lmr
        return Reach(region, lmr)

    def stale(self, rmr_context: int, address: int, length: int) -> bool:
        """Noncoherent mode: does the CPU view differ from what an RDMA Read will see?"""
        entry = self.by_rmr_context.get(rmr_context)
        lmr = entry if isinstance(entry, Lmr) or entry is None else entry.lmr
        if lmr is None or lmr.io is None:
            return False
        off = address - lmr.region.address
        return lmr.io[off : off + length] != lmr.view[off : off + length]

    def mark_written(self, rmr_context: int, address: int, length: int) -> None:
        """Noncoherent mode: an incoming RDMA Write changed [address, +length) of the I/O view."""
        entry = self.by_rmr_context.get(rmr_context)
        lmr = entry if isinstance(entry, Lmr) or entry is None else entry.lmr
        if lmr is None or lmr.io is None or not length:
            return
        start = lmr.offset + address - lmr.region.address
        self._written.setdefault(lmr.segment, []).append((start, start + length))

    def sync(self, lmr: Lmr, address: int, length: int, to_cpu: bool) -> None:
        """dat_lmr_sync_rdma_write (to_cpu: what incoming RDMA Writes changed in the range
        reaches the CPU view; the CPU's other bytes stay) or _read (the CPU's bytes of the
        range reach the I/O view)."""
        if lmr.io is None:
            return
        start = lmr.offset + address - lmr.region.address
        end = start + length
        kept = []
        for a, b in self._written.get(lmr.segment, []):
            lo, hi = max(a, start), min(b, end)
            if lo >= hi:
                kept.append((a, b))
                continue
            if to_cpu:
                lmr.view[lo - lmr.offset : hi - lmr.offset] = lmr.io[
                    lo - lmr.offset : hi - lmr.offset
                ]
            kept += [(a, lo)] if a < lo else []
            kept += [(hi, b)] if hi < b else []
        self._written[lmr.segment] = kept
        if not to_cpu:
            off = start - lmr.offset
            lmr.io[off : off + length] = lmr.view[off : off + length]
