"""The consumers' own memory in the in-memory fabric: what cross-memory attach reaches."""

from __future__ import annotations

from collections.abc import Sequence

from fabricd.procmem import Piece, Scatter


class Processes:
    """The consumers' own memory, by pid: buffers at addresses (a ProcessMemory)."""

    def __init__(self) -> None:
        self.buffers: dict[int, dict[int, bytearray]] = {}  # pid -> address -> bytes
        self.writes: list[int] = []  # the pieces of each write call, in order
        self.puts = 0  # the lane's puts (a lone Write each)

    def place(self, pid: int, address: int, data: bytes) -> None:
        """Put a buffer of process ``pid`` at ``address`` (its malloc, say)."""
        self.buffers.setdefault(pid, {})[address] = bytearray(data)

    def remove(self, pid: int, address: int) -> None:
        """The process freed (unmapped) the buffer at ``address``."""
        del self.buffers[pid][address]

    def _range(self, pid: int, address: int, length: int) -> memoryview:
        for base, buf in self.buffers.get(pid, {}).items():
            if base <= address and address + length <= base + len(buf):
                return memoryview(buf)[address - base : address - base + length]
        raise OSError(14, f"{address:#x}+{length} is not mapped in {pid}")

    def read(self, pid: int, pieces: Sequence[Piece]) -> None:
        for address, into in pieces:
            into[:] = self._range(pid, address, len(into))

    def write(self, pid: int, pieces: Sequence[Piece]) -> None:
        self.writes.append(len(pieces))
        for address, data in pieces:
            self._range(pid, address, len(data))[:] = data

    def put(self, pid: int, address: int, source: memoryview, offset: int, length: int) -> bool:
        self.puts += 1
        try:
            self.write(pid, [(address, source[offset : offset + length])])
        except OSError:
            return False
        return True

    def scatter(self, pid: int, source: bytearray, plan: Sequence[Scatter]) -> None:
        self.write(pid, [(address, memoryview(source)[at : at + n]) for address, at, n in plan])
