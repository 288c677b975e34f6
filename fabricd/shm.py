"""The daemon's side of shared memory: segments as sealed memfds, never files it opens by name.

A segment is a memfd the daemon made (an EP's work queues, an EVD's event queue, a
SHARED_VIRTUAL region) or one a driver handed over through the segment desk (the Python
client's arena). Either way it is sealed against shrinking and growing before the daemon maps
it, so no consumer can truncate memory under the daemon's mapping (an access there would be a
SIGBUS that kills the node), and the daemon never opens a path a consumer could name or link.
Drivers get the daemon's segments as descriptors too (fabricd/desk.py); nothing is in /dev/shm.
"""

from __future__ import annotations

import fcntl
import mmap
import os
from dataclasses import dataclass

from fabricd import _plaintake
from proto.native import View

F_SEAL_FUTURE_WRITE = 0x0010  # linux/fcntl.h; the fcntl module does not name it
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
"""What every mapped segment carries: its size is fixed for as long as it exists."""


class BadSegment(ValueError):
    """A descriptor handed over that cannot serve as a segment (why is in the message)."""


@dataclass(eq=False)
class _Segment:
    fd: int
    mm: mmap.mmap
    view: View
    refs: int = 0  # map() calls not yet undone
    removed: bool = False  # closed once the last mapping goes


def seal(fd: int) -> None:
    """Fix the size of memfd ``fd`` (BadSegment if it is no memfd, or may be written no more, or
    its seals were sealed without these)."""
    try:
        have = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise BadSegment("the descriptor is not a memfd (memfd_create)") from None
    if have & (fcntl.F_SEAL_WRITE | F_SEAL_FUTURE_WRITE):
        raise BadSegment("the memfd is sealed against writing")
    if have & SEALS != SEALS:
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        except OSError as err:
            raise BadSegment(f"the memfd cannot be sealed against resizing: {err}") from None


class ShmMapper:
    """Every segment of the node by name: mapped once, shared by every LMR and queue over it."""

    def __init__(self) -> None:
        self._segments: dict[str, _Segment] = {}
        self._zombies: list[mmap.mmap] = []
        self._shadows: dict[str, memoryview] = {}

    fence = staticmethod(_plaintake.fence)
    """A full memory barrier: our earlier stores to the shared rings are visible before our
    later loads (x86-64 reorders a store after a later load; C11's seq_cst fence forbids it)."""

    def create(self, name: str, size: int) -> int:
        """A new segment of ``size`` zero bytes (or the one of that name); returns its size."""
        seg = self._segments.get(name)
        if seg is not None:
            return len(seg.view)
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            seal(fd)
            self._add(name, fd, size)
        except BaseException:
            os.close(fd)
            raise
        return size

    def attach(self, name: str, fd: int, size: int) -> None:
        """Take over a driver's memfd as segment ``name`` (the descriptor is ours from now on,
        closed when the segment goes). BadSegment if it cannot serve."""
        try:
            seal(fd)
            if not 0 < size == os.fstat(fd).st_size:
                raise BadSegment(f"the memfd does not hold {size} bytes")
            self._add(name, fd, size)
        except BaseException:
            os.close(fd)
            raise

    def _add(self, name: str, fd: int, size: int) -> None:
        mm = mmap.mmap(fd, size)
        self._segments[name] = _Segment(fd, mm, memoryview(mm))

    def descriptor(self, name: str) -> int:
        """The memfd of segment ``name`` (KeyError if there is none), for a driver to map."""
        return self._segments[name].fd

    def map(self, name: str) -> memoryview:
        """A writable view of the whole segment ``name`` (counted; ValueError if none)."""
        seg = self._segments.get(name)
        if seg is None or seg.removed:
            raise ValueError(f"no segment {name!r} on this node")
        seg.refs += 1
        return seg.view

    def shadow(self, name: str) -> memoryview:
        """Private memory the size of segment ``name``: its I/O view in noncoherent mode."""
        view = self._shadows.get(name)
        if view is None:
            size = len(self._segments[name].view)
            view = self._shadows[name] = memoryview(mmap.mmap(-1, size))
        return view

    def unmap(self, name: str) -> None:
        """Drop one reference; a removed segment goes with its last one."""
        seg = self._segments.get(name)
        if seg is not None:
            seg.refs -= 1
            if seg.refs <= 0 and seg.removed:
                self._close(name, seg)

    def remove(self, name: str) -> None:
        """The segment's owner is done with it: it goes once nothing maps it."""
        seg = self._segments.get(name)
        if seg is not None:
            seg.removed = True
            if seg.refs <= 0:
                self._close(name, seg)

    def _close(self, name: str, seg: _Segment) -> None:
        del self._segments[name]
        seg.view.release()
        os.close(seg.fd)
        shadow = self._shadows.pop(name, None)
        if shadow is not None:
            shadow.release()
        self._zombies.append(seg.mm)
        self._reap()

    def _reap(self) -> None:
        """Close the mappings whose bytes nothing references any more (a send queued on a
        socket may still view one; it is closed at a later call)."""
        alive = []
        for mm in self._zombies:
            try:
                mm.close()
            except BufferError:
                alive.append(mm)
        self._zombies = alive

    def close(self) -> None:
        """Unmap everything (daemon shutdown)."""
        for name, seg in list(self._segments.items()):
            seg.refs, seg.removed = 0, True
            self._close(name, seg)
