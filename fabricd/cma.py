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


# One iovec each side, reused: the daemon's loop makes one transfer at a time.
_LOCAL, _REMOTE = _Iovec(), _Iovec()
_LOCAL_P, _REMOTE_P = ctypes.byref(_LOCAL), ctypes.byref(_REMOTE)


def _transfer(name: str, pid: int, address: int, buf: memoryview) -> None:
    """Move all of ``buf`` between this process and [address, +len) of ``pid``; a short
    transfer continues where it stopped; OSError if the range is not mapped there."""
    length = len(buf)
    if not length:
        return
    if buf.readonly:  # only written from: ctypes takes the address of writable buffers alone
        buf = memoryview(bytearray(buf))
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    fn = _CALLS[name]
    done = 0
    while done < length:
        _LOCAL.iov_base, _LOCAL.iov_len = base + done, length - done
        _REMOTE.iov_base, _REMOTE.iov_len = address + done, length - done
        n = fn(pid, _LOCAL_P, 1, _REMOTE_P, 1, 0)
        if n <= 0:
            err = ctypes.get_errno() if n < 0 else 14  # EFAULT: nothing moved
            raise OSError(err, f"{name} of {address + done:#x} in {pid}: {os.strerror(err)}")
        done += n


class CrossMemory:
    """ProcessMemory over process_vm_readv / process_vm_writev."""

    def read(self, pid: int, address: int, into: memoryview) -> None:
        """Copy [address, +len(into)) of process ``pid`` into ``into``."""
        _transfer("process_vm_readv", pid, address, into)

    def write(self, pid: int, address: int, data: memoryview) -> None:
        """Copy ``data`` to [address, +len(data)) of process ``pid``."""
        _transfer("process_vm_writev", pid, address, data)
