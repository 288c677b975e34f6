"""fabricd.cma (CrossMemory): process_vm_readv/writev through ctypes, on this process and a
child: every byte moved, partial transfers, a process that is gone."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from fabricd.cma import IOV_MAX, CrossMemory

PAGE = mmap.PAGESIZE


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


@contextlib.contextmanager
def _page_then_hole() -> Iterator[int]:
    """The address of a mapped page of this process with an unmapped one right after it."""
    libc = _libc()
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    base = libc.mmap(None, 2 * PAGE, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    try:
        assert libc.munmap(base + PAGE, PAGE) == 0
        yield base
    finally:
        libc.munmap(base, PAGE)


def test_read_and_write_move_every_byte() -> None:
    source = ctypes.create_string_buffer(bytes(range(256)) * 64)
    mirror = memoryview(bytearray(len(source.raw)))
    cma = CrossMemory()
    cma.read(os.getpid(), [(ctypes.addressof(source), mirror)])
    assert bytes(mirror) == source.raw
    mirror[:] = b"\x5a" * len(mirror)
    cma.write(os.getpid(), [(ctypes.addressof(source) + 100, mirror[100:200])])
    assert source.raw[100:200] == b"\x5a" * 100 and source.raw[99] == 99


def test_a_read_only_buffer_can_be_written_from() -> None:
    target = ctypes.create_string_buffer(8)
    CrossMemory().write(os.getpid(), [(ctypes.addressof(target), memoryview(b"readonly"))])
    assert target.raw == b"readonly"


def test_a_range_running_into_an_unmapped_page_is_efault_after_the_part_that_moved() -> None:
    """The kernel moves the mapped part and stops (a partial transfer); the rest is asked for
    again and fails: EFAULT, with the mapped part already copied."""
    with _page_then_hole() as base:
        ctypes.memset(base + PAGE - 16, 0x77, 16)
        mirror = memoryview(bytearray(32))
        with pytest.raises(OSError) as fault:
            CrossMemory().read(os.getpid(), [(base + PAGE - 16, mirror)])
        assert fault.value.errno == errno.EFAULT
        assert bytes(mirror) == b"\x77" * 16 + bytes(16)
        with pytest.raises(OSError) as fault:
            CrossMemory().write(os.getpid(), [(base + PAGE, memoryview(bytearray(1)))])
        assert fault.value.errno == errno.EFAULT


def test_many_pieces_move_in_one_call_and_a_bad_one_stops_there() -> None:
    """A list of pieces (a batch of Writes) moves together; a piece the kernel cannot move
    raises, with every piece before it moved and none after it."""
    with _page_then_hole() as base:
        pieces = [(base + 64 * i, memoryview(bytes([i + 1]) * 64)) for i in range(50)]
        CrossMemory().write(os.getpid(), pieces)
        assert ctypes.string_at(base, 64 * 50) == b"".join(bytes([i + 1]) * 64 for i in range(50))
        ctypes.memset(base, 0, PAGE)
        bad = [pieces[0], (base + PAGE - 8, memoryview(b"\x33" * 16)), pieces[1]]
        with pytest.raises(OSError) as fault:
            CrossMemory().write(os.getpid(), bad)
        assert fault.value.errno == errno.EFAULT
        assert ctypes.string_at(base, 64) == b"\x01" * 64, "the piece before it moved"
        assert ctypes.string_at(base + PAGE - 8, 8) == b"\x33" * 8, "and its mapped part"
        assert ctypes.string_at(base + 64, 64) == bytes(64), "the piece after it did not"


def test_scatter_moves_planned_parts_of_one_buffer_in_order() -> None:
    """scatter: parts of one buffer to their addresses in one call, in the plan's order (the
    later part wins where two overlap); a part the kernel cannot move raises there."""
    with _page_then_hole() as base:
        source = bytearray(b"".join(bytes([i + 1]) * 16 for i in range(4)))
        plan = [(base, 0, 16), (base + 64, 16, 32), (base + 8, 48, 16)]
        CrossMemory().scatter(os.getpid(), source, plan)
        assert ctypes.string_at(base, 24) == b"\x01" * 8 + b"\x04" * 16, "the later part won"
        assert ctypes.string_at(base + 64, 32) == b"\x02" * 16 + b"\x03" * 16
        with pytest.raises(OSError) as fault:
            CrossMemory().scatter(os.getpid(), source, [(base + PAGE - 8, 0, 16)])
        assert fault.value.errno == errno.EFAULT
        CrossMemory().scatter(os.getpid(), bytearray(), [])  # nothing to move


def test_one_instance_moves_any_number_of_pieces_call_after_call() -> None:
    """The iovec arrays a CrossMemory reuses: more pieces than one call takes (IOV_MAX) move
    in several calls, and a call of one piece or a few after it moves exactly its own."""
    cma = CrossMemory()
    count = 2 * IOV_MAX + 5
    target = ctypes.create_string_buffer(2 * count)
    base = ctypes.addressof(target)
    source = bytearray(b"".join(i.to_bytes(2, "little") for i in range(count)))
    cma.scatter(os.getpid(), source, [(base + 2 * i, 2 * i, 2) for i in range(count)])
    assert target.raw == bytes(source)
    cma.scatter(os.getpid(), bytearray(b"\xee\xee"), [(base, 0, 2)])
    cma.write(os.getpid(), [(base + 4, memoryview(b"ab")), (base + 10, memoryview(b"cd"))])
    expected = b"\xee\xee" + bytes(source[2:4]) + b"ab" + bytes(source[6:10]) + b"cd"
    assert target.raw[:12] == expected and target.raw[12:] == bytes(source[12:])


def test_a_process_that_is_gone_is_esrch() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(OSError) as gone:
        CrossMemory().read(child.pid, [(0x1000, memoryview(bytearray(1)))])
    assert gone.value.errno == errno.ESRCH


def test_another_process_is_reached() -> None:
    """A child prints the address of its buffer; we change it, it prints what it holds."""
    code = (
        "import ctypes,sys; b=ctypes.create_string_buffer(b'before', 16);"
        "print(ctypes.addressof(b), flush=True); sys.stdin.readline(); print(b.value.decode())"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        address = int(child.stdout.readline())
        seen = memoryview(bytearray(6))
        CrossMemory().read(child.pid, [(address, seen)])
        assert bytes(seen) == b"before"
        CrossMemory().write(child.pid, [(address, memoryview(b"after\0"))])
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "after"
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stdin.close()
