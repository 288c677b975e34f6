"""Cross-memory attach: the daemon reads and writes a consumer process's own memory in place
(process_vm_readv / process_vm_writev), the shell's ProcessMemory for LMRs over a C program's
malloc, stack or static buffers (docs/provider.md).

The kernel checks ptrace access: the daemon runs as the program's user (or root) in its PID
namespace, and where Yama restricts ptrace the provider names the daemon its ptracer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from collections.abc import Sequence

from fabricd import _lanes as lanes
from fabricd.procmem import Piece, Scatter


class _Iovec(ctypes.Structure):
    _fields_ = (("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t))


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_CALLS = {}
for _name in ("process_vm_readv", "process_vm_writev"):
    _fn = getattr(_libc, _name)
    # the iovec arrays by address: no ctypes type check or conversion per call
    _fn.argtypes = (
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_ulong,
    )
    _fn.restype = ctypes.c_ssize_t
    _CALLS[_name] = _fn


IOV_MAX = 1024
"""Most iovecs one process_vm_readv / writev takes (UIO_MAXIOV)."""
_ONE_IOVEC = struct.Struct("<2Q")


def _base(buf: memoryview | bytearray) -> int:
    """The address of a writable buffer's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


Move = tuple[int, int, int]
"""(address in the other process, address here, length): one iovec pair."""


def _one(name: str, pid: int, move: Move) -> None:
    """Move all of one range; a short transfer continues where it stopped; OSError if the
    range is not mapped there."""
    address, base, length = move
    local, remote = _Iovec(), _Iovec()
    done = 0
    while done < length:
        local.iov_base, local.iov_len = base + done, length - done
        remote.iov_base, remote.iov_len = address + done, length - done
        n = _CALLS[name](pid, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
        if n <= 0:
            err = ctypes.get_errno() if n < 0 else 14  # EFAULT: nothing moved
            raise OSError(err, f"{name} of {address + done:#x} in {pid}: {os.strerror(err)}")
        done += n


class CrossMemory:
    """ProcessMemory over process_vm_readv / process_vm_writev. Its two iovec arrays are made
    once and written in place for every call (the daemon's one thread makes the calls):
    making them per call cost more than the system call itself (a 64 B scatter, timeit:
    6.9 us in all against 2.2 us in the kernel)."""

    def __init__(self) -> None:
        self._local = (_Iovec * IOV_MAX)()
        self._remote = (_Iovec * IOV_MAX)()
        self._at = ctypes.addressof(self._local), ctypes.addressof(self._remote)
        self._packs: dict[int, struct.Struct] = {}  # by the number of iovecs
        self.put = lanes.put_process  # C called from C, for the lane: no ctypes per Write

    def read(self, pid: int, pieces: Sequence[Piece]) -> None:
        """Copy each piece's range of process ``pid`` into the piece's buffer."""
        self._transfer("process_vm_readv", pid, pieces)

    def write(self, pid: int, pieces: Sequence[Piece]) -> None:
        """Copy each piece's buffer to its range of process ``pid``."""
        self._transfer("process_vm_writev", pid, pieces)

    def scatter(self, pid: int, source: bytearray, plan: Sequence[Scatter]) -> None:
        """Copy each planned part of ``source`` to its address in process ``pid`` (one base
        address for all of them: no ctypes object per part)."""
        if not source:
            return  # nothing planned can have bytes
        base = _base(source)
        self._vectored("process_vm_writev", pid, [(a, base + at, n) for a, at, n in plan])

    def _transfer(self, name: str, pid: int, pieces: Sequence[Piece]) -> None:
        """Move every piece between this process and ``pid`` (a batch of small RDMA Writes to
        a C program: one system call, not one per Write)."""
        held, moves = [], []  # held: the buffers moved from, alive until the call returns
        for address, buf in pieces:
            if len(buf):  # only written from: ctypes takes the address of writable buffers alone
                buf = memoryview(bytearray(buf)) if buf.readonly else buf
                held.append(buf)
                moves.append((address, _base(buf), len(buf)))
        self._vectored(name, pid, moves)

    def _vectored(self, name: str, pid: int, moves: Sequence[Move]) -> None:
        """One system call for up to IOV_MAX moves, packed into the iovec arrays in one go.
        The kernel stops at the first it cannot move; from there each goes alone, so the one
        that fails raises OSError with the bytes before it moved."""
        local_at, remote_at = self._at
        call = _CALLS[name]
        for at in range(0, len(moves), IOV_MAX):
            chunk = moves[at : at + IOV_MAX] if len(moves) > IOV_MAX else moves
            n = len(chunk)
            if n == 1:  # the common batch: all of it to one buffer
                address, base, length = chunk[0]
                _ONE_IOVEC.pack_into(self._local, 0, base, length)
                _ONE_IOVEC.pack_into(self._remote, 0, address, length)
            else:
                pack = self._packs.get(n)
                if pack is None:
                    pack = self._packs[n] = struct.Struct(f"<{2 * n}Q")
                pack.pack_into(self._local, 0, *[x for _, b, length in chunk for x in (b, length)])
                pack.pack_into(self._remote, 0, *[x for a, _, length in chunk for x in (a, length)])
            moved = call(pid, local_at, n, remote_at, n, 0)
            for address, base, length in chunk:
                if moved < length:  # this one, and every one after it, alone
                    done = max(moved, 0)
                    _one(name, pid, (address + done, base + done, length - done))
                moved -= length
