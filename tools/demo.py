"""The demo workload: two consumers on two nodes, in the manner of OFED's dtest.

The client connects with 48 bytes of private data (the server answers each byte + 1), both sides
swap RMR triplets with Send/Receive, the client RDMA Writes a pattern into the server's memory
and RDMA Reads it back, times both, and finally asks the server to check its own memory.
"""

from __future__ import annotations

import hashlib
import statistics
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from client.api import Ep, Evd, Ia, Lmr
from client.core import Event
from proto.attrs import EpAttr
from proto.constants import CloseFlags, DtoCompletionStatus, EventNumber, MemPriv, MemType

TRIPLET = struct.Struct("!QII")  # virtual_address, segment_length, rmr_context (network order)
DONE = struct.Struct("!I32s")  # pattern seed, blake2b digest of what the server should hold
TIMEOUT_US = 10_000_000
PDATA = bytes(range(1, 49))
CONNECTED = "connected"  # the client's line once its connection is established


class DemoError(RuntimeError):
    """The workload saw something other than what the spec promises."""


@dataclass
class Row:
    """One line of the result table."""

    operation: str
    size: int
    iterations: int
    mb_per_s: float
    median_us: float


def pattern(size: int, seed: int) -> bytes:
    """The bytes the client writes: a seed-dependent repeating pattern."""
    block = bytes((i * 131 + seed) & 0xFF for i in range(4096))
    return (block * (size // len(block) + 1))[:size]


def expect(evd: Evd, number: EventNumber, what: str) -> Event:
    """Wait for one event and insist on its kind and success."""
    event, _ = evd.wait(TIMEOUT_US)
    if event.event_number != number:
        raise DemoError(f"{what}: got {event.event_number.name}, expected {number.name}")
    if (
        number == EventNumber.DTO_COMPLETION_EVENT
        and event.status != DtoCompletionStatus.DTO_SUCCESS
    ):
        status = DtoCompletionStatus(event.status).name
        raise DemoError(f"{what} (cookie {event.cookie}): completed with {status}")
    return event


class Side:
    """What both roles set up: IA, PZ, EVDs, an EP, a data LMR and a message LMR."""

    def __init__(self, ia_name: str, size: int, window: int) -> None:
        self.ia = Ia(ia_name)
        self.pz = self.ia.pz_create()
        self.dto_evd = self.ia.evd_create(4 * window + 16)
        self.conn_evd = self.ia.evd_create(16)
        attr = EpAttr(max_request_dtos=window + 2, max_recv_dtos=4)
        self.ep: Ep = self.ia.ep_create(self.pz, self.dto_evd, self.dto_evd, self.conn_evd, attr)
        self.data_buf = self.ia.alloc(size)
        self.data = self.ia.lmr_create(MemType.VIRTUAL, self.data_buf, size, self.pz, MemPriv.ALL)
        self.msg_buf = self.ia.alloc(256)
        self.msg: Lmr = self.ia.lmr_create(
            MemType.VIRTUAL, self.msg_buf, 256, self.pz, MemPriv.LOCAL_READ | MemPriv.LOCAL_WRITE
        )
        self.ep.post_recv([self.msg.triplet(128, 128)], cookie=1)

    def connect(self, peer: str, conn_qual: int, patience: float = 60.0) -> Event:
        """Connect; while nobody listens yet, reset, repost and retry (as dapltest does), for
        up to ``patience`` seconds: six demo containers started at once on a loaded 2-core
        machine had a server listen over 10 s after its client began (CI, 2026-11-28)."""
        deadline = time.monotonic() + patience
        while True:
            self.ep.connect(peer, conn_qual, TIMEOUT_US, PDATA)
            event, _ = self.conn_evd.wait(TIMEOUT_US)
            retry = event.event_number == EventNumber.CONNECTION_EVENT_NON_PEER_REJECTED
            if not retry or time.monotonic() > deadline:
                break
            flushed, _ = self.dto_evd.wait(TIMEOUT_US)  # the receive posted before connecting
            if flushed.status != DtoCompletionStatus.DTO_ERR_FLUSHED:
                raise DemoError("a rejected connect must flush the posted receive")
            self.ep.reset()
            self.ep.post_recv([self.msg.triplet(128, 128)], cookie=1)
            time.sleep(0.05)
        if event.event_number != EventNumber.CONNECTION_EVENT_ESTABLISHED:
            raise DemoError(f"connect: got {event.event_number.name}")
        return event

    def send(self, payload: bytes) -> None:
        """Send a small message and wait for its completion."""
        self.msg_buf.view[: len(payload)] = payload
        self.ep.post_send([self.msg.triplet(0, len(payload))], cookie=2)
        expect(self.dto_evd, EventNumber.DTO_COMPLETION_EVENT, "send")

    def receive(self) -> bytes:
        """Wait for the posted receive, return its bytes and post the next one."""
        event = expect(self.dto_evd, EventNumber.DTO_COMPLETION_EVENT, "receive")
        data = bytes(self.msg_buf.view[128 : 128 + event.transfered_length])
        self.ep.post_recv([self.msg.triplet(128, 128)], cookie=1)
        return data

    def triplet(self) -> bytes:
        """This side's data region as an RMR triplet, packed as dtest does."""
        return TRIPLET.pack(
            self.data.registered_address, self.data.registered_size, self.data.rmr_context
        )

    def close(self) -> None:
        """Tear down (dat_ia_close ABRUPT frees the rest)."""
        self.ia.close()


def serve(ia_name: str, conn_qual: int, size: int) -> bool:
    """The passive side: accept one connection and, at the end, verify its memory."""
    side = Side(ia_name, size, 2)
    try:
        cr_evd = side.ia.evd_create(8)
        psp = side.ia.psp_create(conn_qual, cr_evd)
        request = expect(cr_evd, EventNumber.CONNECTION_REQUEST_EVENT, "connection request")
        if request.private_data != PDATA:
            raise DemoError("connection request carried the wrong private data")
        side.ia.cr(request).accept(side.ep, bytes(b + 1 for b in PDATA))
        expect(side.conn_evd, EventNumber.CONNECTION_EVENT_ESTABLISHED, "established")
        psp.free()
        side.send(side.triplet())
        side.receive()  # the client's triplet (swapped as dtest does; not needed here)
        _seed, digest = DONE.unpack(side.receive())
        ok: bool = hashlib.blake2b(side.data_buf.view, digest_size=32).digest() == digest
        side.send(b"OK" if ok else b"BAD")
        expect(side.conn_evd, EventNumber.CONNECTION_EVENT_DISCONNECTED, "disconnected")
        return ok
    finally:
        side.close()


def _timed(
    evd: Evd, post: Callable[[int], None], iters: int, window: int
) -> tuple[float, list[float]]:
    """Run ``iters`` posts with at most ``window`` outstanding; (seconds, per-op latencies)."""
    lat: list[float] = []
    started: dict[int, float] = {}
    t0 = time.perf_counter()
    posted = done = 0
    while done < iters:
        while posted < iters and posted - done < window:
            started[posted] = time.perf_counter()
            post(posted)
            posted += 1
        event = expect(evd, EventNumber.DTO_COMPLETION_EVENT, "timed operation")
        lat.append(time.perf_counter() - started.pop(event.cookie))
        done += 1
    return time.perf_counter() - t0, lat


def _measure(
    name: str,
    post: Callable[[list[list[int]], int, list[int]], None],
    lmr: Lmr,
    remote: list[int],
    evd: Evd,
    iters: int,
    window: int,
) -> Row:
    """Bandwidth at full size and window, then the median latency of 64 B at window 1."""
    size = lmr.registered_size
    secs, _ = _timed(evd, lambda c: post([lmr.triplet()], c, remote), iters, window)
    small = [remote[0], 64, remote[2]]
    _, lat = _timed(evd, lambda c: post([lmr.triplet(0, 64)], c, small), iters, 1)
    return Row(name, size, iters, size * iters / secs / 1e6, statistics.median(lat) * 1e6)


def run_client(
    ia_name: str, peer: str, conn_qual: int, size: int, iters: int, window: int, seed: int = 7
) -> list[Row]:
    """The active side: connect, move the pattern both ways, verify, and time it."""
    side = Side(ia_name, size, window)
    check = side.ia.alloc(size)
    check_lmr = side.ia.lmr_create(MemType.VIRTUAL, check, size, side.pz, MemPriv.ALL)
    try:
        est = side.connect(peer, conn_qual)
        print(CONNECTED, flush=True)  # a fault schedule starts now (fabricctl demo --faults)
        if est.private_data != bytes(b + 1 for b in PDATA):
            raise DemoError("the accept carried the wrong private data")
        side.send(side.triplet())
        remote = list(TRIPLET.unpack(side.receive()))
        if remote[1] < size:
            raise DemoError(f"the server offers {remote[1]} bytes, {size} needed")
        data = pattern(size, seed)
        side.data_buf.view[:] = data
        side.ep.post_rdma_write([side.data.triplet()], 0, remote)
        expect(side.dto_evd, EventNumber.DTO_COMPLETION_EVENT, "RDMA write")
        side.ep.post_rdma_read([check_lmr.triplet()], 0, remote)
        expect(side.dto_evd, EventNumber.DTO_COMPLETION_EVENT, "RDMA read")
        if bytes(check.view) != data:
            raise DemoError("RDMA Read returned other bytes than were written")
        rows = [
            _measure(
                "RDMA Write",
                side.ep.post_rdma_write,
                side.data,
                remote,
                side.dto_evd,
                iters,
                window,
            ),
            _measure(
                "RDMA Read", side.ep.post_rdma_read, check_lmr, remote, side.dto_evd, iters, window
            ),
        ]
        check.view[:] = bytes(size)
        side.ep.post_rdma_read([check_lmr.triplet()], 0, remote)
        expect(side.dto_evd, EventNumber.DTO_COMPLETION_EVENT, "final RDMA read")
        if bytes(check.view) != data:
            raise DemoError("the server's memory changed under the benchmark")
        side.send(DONE.pack(seed, hashlib.blake2b(data, digest_size=32).digest()))
        if side.receive() != b"OK":
            raise DemoError("the server found other bytes in its memory than were written")
        side.ep.disconnect(CloseFlags.ABRUPT)
        expect(side.conn_evd, EventNumber.CONNECTION_EVENT_DISCONNECTED, "disconnected")
        return rows
    finally:
        side.close()


def table(rows: list[Row]) -> str:
    """The result table (MB = 10^6 bytes; latency: post to completion of one 64 B operation)."""
    lines = [f"{'operation':<12}{'size':>10}{'iters':>8}{'MB/s':>10}{'median lat 64B (us)':>22}"]
    lines += [
        f"{r.operation:<12}{r.size:>10}{r.iterations:>8}{r.mb_per_s:>10.1f}{r.median_us:>22.1f}"
        for r in rows
    ]
    return "\n".join(lines)
