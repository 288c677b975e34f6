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

from fabricd.memory import Piece, Scatter


class _Iovec(ctypes.Structure):
    _fields_ = (("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t))


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_CALLS = {}
for _name in ("process_vm_readv", "process_vm_writev"):
    _fn = getattr(_libc, _name)
    _fn.argtypes = (
        ctypes.c_int,
        ctypes.POINTER(_Iovec),
        ctypes.c_ulong,
        ctypes.POINTER(_Iovec),
        ctypes.c_ulong,
        ctypes.c_ulong,
    )
    _fn.restype = ctypes.c_ssize_t
    _CALLS[_name] = _fn


IOV_MAX = 1024
"""Most iovecs one process_vm_readv / writev takes (UIO_MAXIOV)."""


def _base(buf: memoryview) -> int:
    """The address of a writable buffer's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def _one(name: str, pid: int, address: int, buf: memoryview) -> None:
    """Move all of one piece; a short transfer continues where it stopped; OSError if the
    range is not mapped there."""
    local, remote = _Iovec(), _Iovec()
    base, length, done = _base(buf), len(buf), 0
    while done < length:
        local.iov_base, local.iov_len = base + done, length - done
        remote.iov_base, remote.iov_len = address + done, length - done
        n = _CALLS[name](pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n <= 0:
            err = ctypes.get_errno() if n < 0 else 14  # EFAULT: nothing moved
            raise OSError(err, f"{name} of {address + done:#x} in {pid}: {os.strerror(err)}")
        done += n


def _transfer(name: str, pid: int, pieces: Sequence[Piece]) -> None:
    """Move every piece between this process and ``pid`` (a batch of small RDMA Writes to a C
    program: one system call, not one per Write)."""
    moves = []
    for address, buf in pieces:
        if len(buf):  # only written from: ctypes takes the address of writable buffers alone
            buf = memoryview(bytearray(buf)) if buf.readonly else buf
            moves.append((address, _base(buf), buf))
    _vectored(name, pid, moves)


def _vectored(name: str, pid: int, moves: Sequence[tuple[int, int, memoryview]]) -> None:
    """(remote address, local address, the local bytes there) for each move: one system call
    for up to IOV_MAX of them, the iovec arrays packed in one go. The kernel stops at the first
    it cannot move; from there each goes alone, so the one that fails raises OSError with the
    bytes before it moved."""
    for at in range(0, len(moves), IOV_MAX):
        chunk = moves[at : at + IOV_MAX]
        n = len(chunk)
        pack = struct.Struct(f"<{2 * n}Q")
        local, remote = bytearray(pack.size), bytearray(pack.size)
        pack.pack_into(local, 0, *[x for _, base, buf in chunk for x in (base, len(buf))])
        pack.pack_into(remote, 0, *[x for address, _, buf in chunk for x in (address, len(buf))])
        iovecs = _Iovec * n
        moved = _CALLS[name](pid, iovecs.from_buffer(local), n, iovecs.from_buffer(remote), n, 0)
        for address, _, buf in chunk:
            if moved < len(buf):  # this one, and every one after it, alone
                _one(name, pid, address + max(moved, 0), buf[max(moved, 0) :])
            moved -= len(buf)


class CrossMemory:
    """ProcessMemory over process_vm_readv / process_vm_writev."""

    def read(self, pid: int, pieces: Sequence[Piece]) -> None:
        """Copy each piece's range of process ``pid`` into the piece's buffer."""
        _transfer("process_vm_readv", pid, pieces)

    def write(self, pid: int, pieces: Sequence[Piece]) -> None:
        """Copy each piece's buffer to its range of process ``pid``."""
        _transfer("process_vm_writev", pid, pieces)

    def scatter(self, pid: int, source: bytearray, plan: Sequence[Scatter]) -> None:
        """Copy each planned part of ``source`` to its address in process ``pid`` (one base
        address for all of them: no ctypes object per part)."""
        view = memoryview(source)
        if not view:
            return  # nothing planned can have bytes
        base = _base(view)
        moves = [(address, base + at, view[at : at + n]) for address, at, n in plan if n]
        _vectored("process_vm_writev", pid, moves)
