"""C programs on two daemons (provider/tests/peer.c): a write into a stopped program, a program
killed mid-transfer, and C and Python programs connected to each other."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from client.api import Ia
from proto.constants import CloseFlags, EventNumber, MemPriv, MemType
from tests.conftest import StartNode
from tests.integration.flows import WAIT_US, memfds, wait_event
from tests.provider.support import envs_for, line, loopback_pair, popen, programs, say

DISCONNECTED = 0x4005  # DAT_CONNECTION_EVENT_DISCONNECTED
BROKEN = 0x4006  # DAT_CONNECTION_EVENT_BROKEN


def pattern(length: int) -> bytes:
    """What peer.c writes and checks: byte i is i * 13 + 1."""
    return bytes((i * 13 + 1) & 0xFF for i in range(length))


def read_memory(pid: int, address: int, length: int) -> bytes:
    """Bytes of another (stopped) process, as a debugger reads them."""
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(length)


def test_rdma_write_lands_in_a_stopped_c_program(
    build: Path, start: StartNode, tmp_path: Path
) -> None:
    """The one-sided property for C programs: a C program's RDMA Write lands in another C
    program's malloc'd buffer while that program is stopped (SIGSTOP); the bytes are in its
    memory before it runs again."""
    with loopback_pair(start, tmp_path) as (a, b, host), programs() as procs:
        envs = envs_for(tmp_path, build, a, b)
        peer = str(build / "peer")
        tgt = popen(procs, [peer, "df", "target", "4242"], envs[0])
        ready = line(tgt).split()
        assert ready[:1] == ["READY"], ready
        address, _, length = (int(v) for v in ready[1:])
        wr = popen(procs, [peer, "df", "write", host, "4242", *ready[1:]], envs[1])
        assert line(wr) == "CONNECTED"
        os.kill(tgt.pid, signal.SIGSTOP)
        say(wr)
        assert line(wr) == "WRITTEN 0"
        assert read_memory(tgt.pid, address, length) == pattern(length), "not in the program"
        os.kill(tgt.pid, signal.SIGCONT)
        say(tgt, "check")
        assert wr.wait(timeout=60) == 0 and line(wr) == "PASSED"
        assert line(tgt) == f"ENDED {DISCONNECTED:#x}"
        assert tgt.wait(timeout=60) == 0 and line(tgt) == "PASSED"


def test_killed_c_program_breaks_only_its_connection(
    build: Path, start: StartNode, tmp_path: Path
) -> None:
    """A C program killed in the middle of a stream of RDMA Writes: its peer sees the
    connection end, both daemons live on, and no shared-memory segment of it is left."""
    with loopback_pair(start, tmp_path) as (a, b, host), programs() as procs:
        envs = envs_for(tmp_path, build, a, b)
        peer = str(build / "peer")
        tgt = popen(procs, [peer, "df", "target", "4243"], envs[0])
        ready = line(tgt).split()
        wr = popen(procs, [peer, "df", "write-loop", host, "4243", *ready[1:]], envs[1])
        assert line(wr) == "CONNECTED"
        say(wr)
        assert line(wr) == "WRITTEN 0"
        assert memfds(b.proc.pid, f"datfabric-{wr.pid}-"), "its node maps its queues"
        wr.kill()
        wr.wait()
        say(tgt, "skip")
        assert line(tgt) in (f"ENDED {DISCONNECTED:#x}", f"ENDED {BROKEN:#x}")
        assert tgt.wait(timeout=60) == 0 and line(tgt) == "PASSED"
        assert a.proc.poll() is None and b.proc.poll() is None
        deadline = time.monotonic() + 10  # its node lets go of its queues (memfds)
        while left := memfds(b.proc.pid, f"datfabric-{wr.pid}-"):
            assert time.monotonic() < deadline, left


def test_python_program_writes_into_a_c_program(
    build: Path, start: StartNode, tmp_path: Path
) -> None:
    """A mixed pair, Python to C: a Python consumer connects to a C program's PSP and
    RDMA-Writes into its malloc'd buffer; the C program finds the bytes and sees the
    disconnect."""
    with loopback_pair(start, tmp_path) as (a, b, host), programs() as procs:
        envs = envs_for(tmp_path, build, a, b)
        tgt = popen(procs, [str(build / "peer"), "df", "target", "4244"], envs[0])
        address, rmr_context, length = (int(v) for v in line(tgt).split()[1:])
        with Ia(b.socket) as ia:
            pz = ia.pz_create()
            evd = ia.evd_create(16)
            ep = ia.ep_create(pz, evd, evd, evd)
            buf = ia.alloc(length)
            buf.view[:] = pattern(length)
            lmr = ia.lmr_create(MemType.VIRTUAL, buf, length, pz, MemPriv.ALL)
            ep.connect((host, a.port), 4244, WAIT_US)
            wait_event(evd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
            ep.post_rdma_write([lmr.triplet()], 5, [address, length, rmr_context])
            done = wait_event(evd, EventNumber.DTO_COMPLETION_EVENT)
            assert (done.cookie, done.status) == (5, 0)
            say(tgt, "check")
            ep.disconnect(CloseFlags.GRACEFUL)
            wait_event(evd, EventNumber.CONNECTION_EVENT_DISCONNECTED)
        assert line(tgt) == f"ENDED {DISCONNECTED:#x}"
        assert tgt.wait(timeout=60) == 0 and line(tgt) == "PASSED"


def test_c_program_writes_into_a_python_program(
    build: Path, start: StartNode, tmp_path: Path
) -> None:
    """A mixed pair, C to Python: a C program connects to a Python consumer's PSP and
    RDMA-Writes into its buffer; the Python side sees the bytes and the disconnect."""
    with (
        loopback_pair(start, tmp_path) as (a, b, host),
        programs() as procs,
        Ia(a.socket) as ia,
    ):
        length = 65536
        pz = ia.pz_create()
        evd = ia.evd_create(16)
        ep = ia.ep_create(pz, evd, evd, evd)
        buf = ia.alloc(length)
        lmr = ia.lmr_create(MemType.VIRTUAL, buf, length, pz, MemPriv.ALL)
        ia.psp_create(4245, evd)
        address, _, rmr_context = lmr.remote()
        envs = envs_for(tmp_path, build, a, b)
        args = [host, "4245", str(address), str(rmr_context), str(length)]
        wr = popen(procs, [str(build / "peer"), "df", "write", *args], envs[1])
        request = wait_event(evd, EventNumber.CONNECTION_REQUEST_EVENT)
        ia.cr(request).accept(ep)
        wait_event(evd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
        assert line(wr) == "CONNECTED"
        say(wr)
        assert line(wr) == "WRITTEN 0"
        assert bytes(buf.view) == pattern(length)
        wait_event(evd, EventNumber.CONNECTION_EVENT_DISCONNECTED)
        assert wr.wait(timeout=60) == 0 and line(wr) == "PASSED"
