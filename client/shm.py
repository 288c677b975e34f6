"""The consumer's registered-memory allocator: an arena of shared-memory segments per IA.

Every buffer has a real virtual address in this process (what DAT triplets carry), and lives in
a memfd handed to the node's daemon (client.desk), so RDMA lands in it without the consumer's
help; the daemon seals each against resizing before it maps it.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import mmap
import os
import threading
from dataclasses import dataclass

from client.desk import Desk
from proto.constants import OPTIMAL_ALIGNMENT
from proto.segments import SEGMENT_PREFIX, SHARED_PREFIX

DEFAULT_CHUNK = 64 << 20


@dataclass(eq=False)
class Buffer:
    """A block of registrable memory: its address, size and bytes."""

    address: int
    length: int
    view: memoryview
    segment: str
    offset: int

    def __len__(self) -> int:
        return self.length


@dataclass(eq=False)
class _Segment:
    name: str
    mm: mmap.mmap
    view: memoryview
    base: int
    free: list[tuple[int, int]]  # sorted (offset, length) holes


def _address_of(mm: mmap.mmap) -> int:
    anchor = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


class Arena:
    """Sub-allocates shared-memory segments (first fit, 256-byte aligned)."""

    def __init__(self, desk: Desk, chunk: int = DEFAULT_CHUNK) -> None:
        self.desk = desk
        self.chunk = chunk
        self._segments: list[_Segment] = []
        self._by_base: list[int] = []

    def _new_segment(self, size: int) -> _Segment:
        """A memfd of ``size`` bytes, mapped here and handed to the daemon (which seals it
        against resizing before it maps it: docs/host-interface.md section 2)."""
        name = f"{SEGMENT_PREFIX}{self.desk.ia}-arena"  # as /proc/PID/maps shows it
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
            name = self.desk.hand_over(fd, size)
        finally:
            os.close(fd)
        return self._add(_Segment(name, mm, memoryview(mm), _address_of(mm), [(0, size)]))

    def map_shared(self, name: str, size: int) -> Buffer:
        """Map a shared region the daemon created for a cookie (SHARED_VIRTUAL memory)."""
        if not name.startswith(SHARED_PREFIX):
            raise ValueError(f"{name!r} is not a shared region")
        fd = self.desk.fetch(name)
        try:
            mm = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        seg = self._add(_Segment(name, mm, memoryview(mm), _address_of(mm), []))
        return Buffer(seg.base, size, seg.view[:size], name, 0)

    def _add(self, seg: _Segment) -> _Segment:
        i = bisect.bisect(self._by_base, seg.base)
        self._by_base.insert(i, seg.base)
        self._segments.insert(i, seg)
        return seg

    def alloc(self, size: int, align: int = OPTIMAL_ALIGNMENT) -> Buffer:
        """A block of ``size`` bytes (fresh segments are zeroed; reused blocks keep old bytes)."""
        if size <= 0:
            raise ValueError("size must be positive")
        need = -(-size // align) * align
        for seg in self._segments:
            buf = self._carve(seg, need, size)
            if buf is not None:
                return buf
        seg = self._new_segment(max(self.chunk, need))
        buf = self._carve(seg, need, size)
        assert buf is not None
        return buf

    @staticmethod
    def _carve(seg: _Segment, need: int, size: int) -> Buffer | None:
        for i, (off, length) in enumerate(seg.free):
            if length >= need:
                if length == need:
                    del seg.free[i]
                else:
                    seg.free[i] = (off + need, length - need)
                return Buffer(seg.base + off, size, seg.view[off : off + size], seg.name, off)
        return None

    def free(self, buf: Buffer, align: int = OPTIMAL_ALIGNMENT) -> None:
        """Return a buffer's block to its segment, merging neighbouring holes."""
        seg = self._segment_at(buf.address)
        if seg is None:
            return
        need = -(-buf.length // align) * align
        holes = seg.free
        bisect.insort(holes, (buf.offset, need))
        merged: list[tuple[int, int]] = []
        for off, length in holes:
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((off, length))
        seg.free = merged

    def _segment_at(self, address: int) -> _Segment | None:
        i = bisect.bisect(self._by_base, address) - 1
        if i < 0:
            return None
        seg = self._segments[i]
        return seg if address < seg.base + len(seg.mm) else None

    def locate(self, address: int, length: int) -> tuple[str, int] | None:
        """The (segment name, offset) holding [address, address+length), or None."""
        seg = self._segment_at(address)
        if seg is None or address + length > seg.base + len(seg.mm):
            return None
        return seg.name, address - seg.base

    def view(self, address: int, length: int) -> memoryview:
        """The bytes at [address, address+length) (which must lie in one segment)."""
        seg = self._segment_at(address)
        if seg is None or address + length > seg.base + len(seg.mm):
            raise ValueError(f"{address:#x}+{length} is not in this IA's memory")
        off = address - seg.base
        return seg.view[off : off + length]

    def close(self) -> None:
        """Unmap every segment (the daemon's copies go with the IA)."""
        for seg in self._segments:
            seg.view.release()
            # a Buffer still referenced keeps its mapping until the process ends
            with contextlib.suppress(BufferError):
                seg.mm.close()
        self._segments.clear()
        self._by_base.clear()


class QueueMaps:
    """The daemon's queue segments this IA maps (client.core.QueueMapper): the EPs' work
    queues, mapped by name on first use, unmapped when the EP goes."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        self._barrier = threading.Lock()
        self._maps: dict[str, tuple[mmap.mmap, memoryview]] = {}

    def fence(self) -> None:
        """A full memory barrier: our earlier stores to the shared rings are visible before our
        later loads (x86-64 reorders a store after a later load; a locked instruction, which an
        uncontended lock's acquire executes, forbids it)."""
        self._barrier.acquire()
        self._barrier.release()

    def map(self, name: str) -> memoryview:
        entry = self._maps.get(name)
        if entry is None:
            fd = self.desk.fetch(name)
            try:
                mm = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            entry = self._maps[name] = (mm, memoryview(mm))
        return entry[1]

    def unmap(self, name: str) -> None:
        entry = self._maps.pop(name, None)
        if entry is not None:
            mm, view = entry
            view.release()
            with contextlib.suppress(BufferError):  # a ring still viewed: the GC closes it
                mm.close()

    def close(self) -> None:
        for name in list(self._maps):
            self.unmap(name)
