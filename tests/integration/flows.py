"""Flows shared by the loopback and the network-namespace tests."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from client.api import Ep, Evd, Ia, Lmr
from client.core import Event
from proto.constants import DtoCompletionStatus, Dtos, EventNumber, MemPriv, MemType
from tests.integration.passive_consumer import own_pattern

WAIT_US = 10_000_000


def memfds(pid: int, prefix: str = "datfabric-") -> set[str]:
    """The segments process ``pid`` maps whose name starts with ``prefix``: every segment is a
    memfd, which /proc/PID/maps names "/memfd:NAME (deleted)" (empty once the process is gone)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return set()
    names = (line.split("/memfd:", 1)[1].removesuffix(" (deleted)") for line in lines
             if "/memfd:" in line)  # fmt: skip
    return {name for name in names if name.startswith(prefix)}


def wait_event(evd: Evd, number: EventNumber) -> Event:
    """The next event on ``evd``, which must be ``number``."""
    event, _ = evd.wait(WAIT_US)
    assert event.event_number == number, event
    return event


def process_state(pid: int) -> str:
    """The one-letter state of a process (T when stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def stop_process(pid: int) -> None:
    """SIGSTOP a process and wait until the kernel shows it stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while process_state(pid) != "T":
        assert time.monotonic() < deadline, "the process did not stop"
        time.sleep(0.01)


def one_sided(socket_a: str, socket_b: str, peer_b: tuple[str, int], size: int = 1 << 20) -> None:
    """RDMA Write into and Read from a consumer that is stopped (SIGSTOP) the whole time."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.passive_consumer", socket_b, "777", str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "LISTENING"
        with Ia(socket_a) as ia:
            pz = ia.pz_create()
            evd = ia.evd_create(64)
            ep = ia.ep_create(pz, evd, evd, evd)
            buf = ia.alloc(size)
            lmr = ia.lmr_create(MemType.VIRTUAL, buf, size, pz, MemPriv.ALL)
            ep.connect(peer_b, 777, WAIT_US)
            wait_event(evd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
            remote = json.loads(proc.stdout.readline())
            stop_process(proc.pid)

            half = size // 2
            written = hashlib.sha256(b"one-sided").digest() * (half // 32)
            buf.view[:half] = written
            target = [remote["address"] + half, half, remote["rmr_context"]]
            ep.post_rdma_write([lmr.triplet(0, half)], 1, target)
            done = wait_event(evd, EventNumber.DTO_COMPLETION_EVENT)
            assert (done.cookie, done.status, done.operation) == (1, 0, Dtos.RDMA_WRITE)
            assert done.transfered_length == half

            buf.view[:] = bytes(size)
            ep.post_rdma_read([lmr.triplet(0, half)], 2, target)
            ep.post_rdma_read(
                [lmr.triplet(half, half)], 3, [remote["address"], half, remote["rmr_context"]]
            )
            first = wait_event(evd, EventNumber.DTO_COMPLETION_EVENT)
            second = wait_event(evd, EventNumber.DTO_COMPLETION_EVENT)
            assert [(e.cookie, e.status, e.transfered_length) for e in (first, second)] == [
                (2, 0, half),
                (3, 0, half),
            ]
            assert bytes(buf.view[:half]) == written
            assert bytes(buf.view[half:]) == own_pattern(size)
            assert process_state(proc.pid) == "T", "the target ran: not one-sided"
            os.kill(proc.pid, signal.SIGCONT)
            proc.stdin.write(f"check {hashlib.sha256(written).hexdigest()}\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "MATCH"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stdin.close()


@dataclass
class Pair:
    """Two connected endpoints, one per node, with their IAs, EVDs and a registered buffer each."""

    ia_a: Ia
    ia_b: Ia
    ep_a: Ep
    ep_b: Ep
    evd_a: Evd
    evd_b: Evd
    lmr_a: Lmr
    lmr_b: Lmr
    view_a: memoryview
    view_b: memoryview

    def close(self) -> None:
        """Close both IAs."""
        self.ia_a.close()
        self.ia_b.close()


def connect_pair(
    socket_a: str,
    socket_b: str,
    peer_b: tuple[str, int],
    size: int = 65536,
    conn_qual: int = 4000,
    privileges: MemPriv = MemPriv.ALL,
) -> Pair:
    """Open an IA on each node and connect one EP pair (both driven from this process; the
    buffers registered with ``privileges``)."""
    ia_a, ia_b = Ia(socket_a), Ia(socket_b)
    pz_a, pz_b = ia_a.pz_create(), ia_b.pz_create()
    evd_a, evd_b = ia_a.evd_create(256), ia_b.evd_create(256)
    ep_a = ia_a.ep_create(pz_a, evd_a, evd_a, evd_a)
    ep_b = ia_b.ep_create(pz_b, evd_b, evd_b, evd_b)
    buf_a, buf_b = ia_a.alloc(size), ia_b.alloc(size)
    lmr_a = ia_a.lmr_create(MemType.VIRTUAL, buf_a, size, pz_a, privileges)
    lmr_b = ia_b.lmr_create(MemType.VIRTUAL, buf_b, size, pz_b, privileges)
    ia_b.psp_create(conn_qual, evd_b)
    ep_a.connect(peer_b, conn_qual, WAIT_US)
    request = wait_event(evd_b, EventNumber.CONNECTION_REQUEST_EVENT)
    ia_b.cr(request).accept(ep_b)
    wait_event(evd_a, EventNumber.CONNECTION_EVENT_ESTABLISHED)
    wait_event(evd_b, EventNumber.CONNECTION_EVENT_ESTABLISHED)
    return Pair(ia_a, ia_b, ep_a, ep_b, evd_a, evd_b, lmr_a, lmr_b, buf_a.view, buf_b.view)


__all__ = ["DtoCompletionStatus", "Pair", "connect_pair", "one_sided", "wait_event"]
