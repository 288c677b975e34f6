"""The daemon's side of registered memory: map the consumers' POSIX shared-memory segments."""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import threading

log = logging.getLogger("fabricd.shm")

SHM_DIR = "/dev/shm"
SEGMENT_NAME = re.compile(r"^datfabric-[A-Za-z0-9._-]{1,200}$")
CONSUMER_TOKEN = re.compile(r"^[0-9]{1,10}-[0-9a-f]{1,32}$")


class ShmMapper:
    """Maps segments by name, shared by every LMR over them; unmaps when the last one goes.

    A mapping whose bytes are still referenced (a send queued on a socket) cannot be closed yet;
    it is kept and closed at a later unmap.
    """

    def __init__(self, root: str = SHM_DIR) -> None:
        self._root = root
        self._barrier = threading.Lock()
        self._maps: dict[str, tuple[mmap.mmap, memoryview, int]] = {}
        self._zombies: list[mmap.mmap] = []
        self._shadows: dict[str, memoryview] = {}

    def fence(self) -> None:
        """A full memory barrier: our earlier stores to the shared rings are visible before our
        later loads (x86-64 reorders a store after a later load; a locked instruction, which an
        uncontended lock's acquire executes, forbids it)."""
        self._barrier.acquire()
        self._barrier.release()

    def map(self, name: str) -> memoryview:
        """Return a writable view of the whole segment ``name`` (counted)."""
        entry = self._maps.get(name)
        if entry is None:
            if not SEGMENT_NAME.match(name):
                raise ValueError(f"{name!r} is not a datfabric segment name")
            fd = os.open(os.path.join(self._root, name), os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                if size == 0:
                    raise ValueError(f"segment {name} is empty")
                mm = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            entry = (mm, memoryview(mm), 0)
        mm, view, refs = entry
        self._maps[name] = (mm, view, refs + 1)
        return view

    def shadow(self, name: str) -> memoryview:
        """Private memory the size of segment ``name``: its I/O view in noncoherent mode."""
        view = self._shadows.get(name)
        if view is None:
            size = len(self._maps[name][1])
            view = self._shadows[name] = memoryview(mmap.mmap(-1, size))
        return view

    def unmap(self, name: str) -> None:
        """Drop one reference; the last one unmaps the segment."""
        entry = self._maps.get(name)
        if entry is None:
            return
        mm, view, refs = entry
        if refs > 1:
            self._maps[name] = (mm, view, refs - 1)
            return
        del self._maps[name]
        view.release()
        shadow = self._shadows.pop(name, None)
        if shadow is not None:
            shadow.release()
        self._zombies.append(mm)
        self._reap()

    def _reap(self) -> None:
        alive = []
        for mm in self._zombies:
            try:
                mm.close()
            except BufferError:
                alive.append(mm)
        self._zombies = alive

    def create(self, name: str, size: int) -> int:
        """Create a segment (or find the one a crashed daemon left); returns its size."""
        if not SEGMENT_NAME.match(name):
            raise ValueError(f"{name!r} is not a datfabric segment name")
        fd = os.open(os.path.join(self._root, name), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        """Unlink a segment (the last LMR over a shared region went away)."""
        if SEGMENT_NAME.match(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self._root, name))

    def remove_consumer_segments(self, token: str) -> list[str]:
        """Unlink the segments a consumer created (it died without dat_ia_close)."""
        if not CONSUMER_TOKEN.match(token):
            return []
        prefix = f"datfabric-{token}-"
        gone = []
        for name in os.listdir(self._root):
            if name.startswith(prefix):
                try:
                    os.unlink(os.path.join(self._root, name))
                    gone.append(name)
                except FileNotFoundError:
                    pass
        if gone:
            log.info("removed %d segments of consumer %s", len(gone), token)
        return gone

    def close(self) -> None:
        """Unmap everything (daemon shutdown)."""
        for name in list(self._maps):
            mm, view, _ = self._maps.pop(name)
            view.release()
            self._zombies.append(mm)
        self._reap()
