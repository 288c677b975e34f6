"""Another process's memory as the simulated NIC reaches it (a C program's LMRs over its own
malloc'd bytes): the interface the shell implements with cross-memory attach (fabricd/cma.py),
the pieces it moves, and a batch of Writes planned into one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

Piece = tuple[int, memoryview]
"""(address in another process, the bytes here that move to or from it)."""
Scatter = tuple[int, int, int]
"""(address, offset, length): the bytes [offset, +length) of a buffer that go to ``address``."""


def add_piece(pieces: list[Scatter], address: int, at: int, length: int) -> None:
    """Plan the bytes [at, +length) of a payload for ``address``, after ``pieces``: onto
    exactly the bytes of the piece before, they replace it (the later bytes win); right after
    that piece, at its target and in the payload, they extend it; else a piece of their own."""
    if pieces:
        to, start, n = pieces[-1]
        if to == address and n == length:
            pieces[-1] = (address, at, length)
            return
        if to + n == address and start + n == at:
            pieces[-1] = (to, start, n + length)
            return
    pieces.append((address, at, length))


class PlannedWrites(NamedTuple):
    """Bytes to write into one process's memory, planned under the keys of that moment."""

    pid: int
    pieces: list[Scatter]
    revoked: int  # MemoryRegistry.revoked when the keys were checked


class ProcessMemory(Protocol):
    """Another process's memory, read and written in place (cross-memory attach), a list of
    pieces at a time; raises OSError when a range is not mapped there or the process is gone
    (the pieces before it may have moved)."""

    def read(self, pid: int, pieces: Sequence[Piece]) -> None: ...

    def write(self, pid: int, pieces: Sequence[Piece]) -> None: ...

    def put(self, pid: int, address: int, source: memoryview, offset: int, length: int) -> bool:
        """Copy ``source[offset:+length]`` to ``address`` in process ``pid``; False when the
        range is not mapped there or the process is gone (the target's lane for lone Writes,
        fabricd/_lanes.c: the long way then lands the Write again and fails it)."""
        ...

    def scatter(self, pid: int, source: bytearray, plan: Sequence[Scatter]) -> None:
        """Copy ``source``'s bytes [offset, +length) to ``address`` in process ``pid``, for each
        (address, offset, length) of ``plan`` in order (later ones win where they overlap)."""
        ...


class NoProcessMemory:
    """A node that cannot reach processes' memory: every access fails."""

    def read(self, pid: int, pieces: Sequence[Piece]) -> None:
        raise OSError("this node cannot reach a process's memory")

    def write(self, pid: int, pieces: Sequence[Piece]) -> None:
        raise OSError("this node cannot reach a process's memory")

    def scatter(self, pid: int, source: bytearray, plan: Sequence[Scatter]) -> None:
        raise OSError("this node cannot reach a process's memory")

    def put(self, pid: int, address: int, source: memoryview, offset: int, length: int) -> bool:
        return False
