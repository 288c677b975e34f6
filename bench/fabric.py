"""``fabricctl bench``: perftest-style bandwidth and latency of the fabric itself.

The initiator runs in this process (blocking API); the target is a separate consumer process
(bench.target) that stays idle for RDMA Write and Read. Latency is measured from posting one
operation to its completion event at the initiator, at window 1: a full round trip for every
operation (perftest prints half of it for write and send; this table does not). ``--cq-mod N``
is perftest's CQ moderation: one operation in N is posted signalled, the others with
DAT_COMPLETION_SUPPRESS_FLAG (a completion only if it fails); an EP completes its requests in
order, so a signalled completion retires every request before it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.connections import main as connections_main
from bench.nodes import Fabric, fabric_for
from bench.perftest import LINE, Result, header, moderation, peak, row, warmup
from bench.target import pattern
from client.api import Ep, Evd, Ia, Lmr
from client.records import Event
from proto.attrs import EpAttr
from proto.constants import (
    CompletionFlags,
    DtoCompletionStatus,
    EventNumber,
    MemPriv,
    MemType,
)
from proto.errors import DatQueueEmpty

WAIT_US = 30_000_000
CONN_QUAL = 18515  # perftest's port


class Session:
    """One connected initiator EP, a registered buffer, and the target process."""

    def __init__(self, fabric: Fabric, op: str, size: int, window: int) -> None:
        self.size = size
        self.target = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.target",
                fabric.target,
                str(CONN_QUAL),
                str(size),
                op,
                str(2 * window + 4),  # receives: it reposts half at a time
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.target.stdout is not None
        if self.target.stdout.readline().strip() != "LISTENING":
            raise RuntimeError("the benchmark target did not start")
        self.ia = Ia(fabric.initiator)
        pz = self.ia.pz_create()
        self.evd: Evd = self.ia.evd_create(4 * window + 16)
        attr = EpAttr(max_request_dtos=window, max_rdma_read_out=min(window, 64))
        self.ep: Ep = self.ia.ep_create(pz, self.evd, self.evd, self.evd, attr)
        self.buf = self.ia.alloc(size)
        self.lmr: Lmr = self.ia.lmr_create(MemType.VIRTUAL, self.buf, size, pz, MemPriv.ALL)
        self.ep.connect(fabric.target_address, CONN_QUAL, WAIT_US)
        event, _ = self.evd.wait(WAIT_US)
        if event.event_number != EventNumber.CONNECTION_EVENT_ESTABLISHED:
            raise RuntimeError(f"benchmark connect failed: {event.event_number.name}")
        remote = json.loads(self.target.stdout.readline())
        self.remote = [remote["address"], remote["length"], remote["rmr_context"]]

    def poster(self, op: str, size: int) -> Callable[[int, int], None]:
        """A function posting one operation of ``size`` bytes: (cookie, completion flags)."""
        local = [self.lmr.triplet(0, size)]
        remote = [self.remote[0], size, self.remote[2]]
        ep = self.ep
        if op == "write":
            return lambda cookie, flags: ep.post_rdma_write(local, cookie, remote, flags)
        if op == "read":
            return lambda cookie, flags: ep.post_rdma_read(local, cookie, remote, flags)
        return lambda cookie, flags: ep.post_send(local, cookie, flags)

    def polling(self) -> Callable[[int], tuple[Event, int]]:
        """A wait that never sleeps: dat_evd_dequeue until an event is there (a polling
        program's loop, as dapltest -m p runs)."""
        dequeue = self.evd.dequeue

        def wait(_timeout: int) -> tuple[Event, int]:
            while True:
                try:
                    return dequeue(), 0
                except DatQueueEmpty:
                    continue

        return wait

    def run(
        self,
        op: str,
        size: int,
        iters: int,
        window: int,
        progress: Callable[[int], None],
        poll: bool = False,
        cq_mod: int = 1,
    ) -> tuple[float, list[float], list[float]]:
        """(elapsed seconds, per-op latencies in µs, completion times) for ``iters`` ops. Each
        wait takes every completion queued by then before the window is refilled, as
        perftest's loop polls the CQ for a batch of completions. One op in ``cq_mod`` (at most
        the window) and the last are signalled; a completion retires every op up to its
        cookie (the EP completes its requests in order), which share its completion time."""
        post = self.poster(op, size)
        wait = self.polling() if poll else self.evd.wait
        dequeue = self.evd.dequeue
        started = [0.0] * iters
        finished = [0.0] * iters
        clock = time.perf_counter
        success = int(DtoCompletionStatus.DTO_SUCCESS)  # looked up once, as a C loop would
        mod = moderation(cq_mod, window)
        flags = [0] * iters  # decided before the clock starts: a list index per post
        if mod > 1:
            flags = [int(CompletionFlags.SUPPRESS)] * iters
            flags[mod - 1 :: mod] = [0] * (iters // mod)
            flags[-1] = 0
        posted = done = 0
        t0 = clock()
        while done < iters:
            while posted < iters and posted - done < window:
                started[posted] = clock()
                post(posted, flags[posted])
                posted += 1
            first, more = wait(WAIT_US)
            for event in [first, *(dequeue() for _ in range(more))] if more else (first,):
                if event.status != success:
                    status = DtoCompletionStatus(event.status).name
                    raise RuntimeError(f"{op} {event.cookie} completed with {status}")
                upto = event.cookie + 1
                finished[event.cookie] = clock()
                if upto >> 10 != done >> 10:
                    progress((upto >> 10 << 10) - (done >> 10 << 10))
                done = upto
        elapsed = clock() - t0
        if mod > 1:  # an unsignalled op retired with the signalled one after it
            for i in range(iters - 2, -1, -1):
                finished[i] = finished[i] or finished[i + 1]
        lat = [(f - s) * 1e6 for s, f in zip(started, finished, strict=True)]
        return elapsed, lat, finished

    def verify(self, op: str, size: int) -> None:
        """Check that the bytes arrived intact (RDMA Read back, or the target's own pattern)."""
        expected = pattern(size, seed=size) if op == "write" else pattern(self.size)[:size]
        if op == "write":
            self.buf.view[:size] = expected
            self.run("write", size, 1, 1, lambda _: None)
            self.buf.view[:size] = bytes(size)
            self.run("read", size, 1, 1, lambda _: None)
        elif op == "read":
            self.buf.view[:size] = bytes(size)
            self.run("read", size, 1, 1, lambda _: None)
        else:
            return  # checked by the target's digest at close
        if bytes(self.buf.view[:size]) != expected:
            raise RuntimeError(f"{op} of {size} bytes: the data did not arrive intact")

    def close(self) -> dict[str, Any]:
        """Disconnect; the target reports what it received."""
        self.ep.disconnect()
        self.ia.close()
        assert self.target.stdout is not None
        line = self.target.stdout.readline()
        self.target.wait(10)
        self.target.stdout.close()
        return dict(json.loads(line)) if line else {}


def measure(
    session: Session,
    op: str,
    mode: str,
    size: int,
    iters: int,
    window: int,
    same_node: bool,
    progress: Callable[[int], None],
    poll: bool = False,
    cq_mod: int = 1,
    warm: int | None = None,
) -> Result:
    """Warm up (``warm`` operations: perftest.warmup), run, and summarise one size."""
    win = 1 if mode == "lat" else window
    mod = moderation(cq_mod, win)
    untimed = warmup(iters, warm)
    if untimed:
        session.run(op, size, untimed, win, lambda _: None, poll, mod)
    elapsed, lat, finished = session.run(op, size, iters, win, progress, poll, mod)
    result = Result(op, mode, size, iters, win, same_node, poll, mod, untimed)
    result.bw_MBps = size * iters / elapsed / 1e6
    result.msg_rate = iters / elapsed / 1e6
    result.bw_peak_MBps = peak(size, finished)
    if mode == "lat":
        result.lat_us = lat
    return result


def default_iters(size: int, mode: str) -> int:
    """perftest's 1000 iterations, fewer for large messages so a size takes about a second."""
    if mode == "lat":
        return 1000
    return max(20, min(1000, (1 << 31) // max(size, 1) // 2))


def sizes_for(args: Any) -> list[int]:
    """--all: 2 B to 8 MiB by powers of two; else --size."""
    if args.all:
        return [1 << i for i in range(1, 24)]
    return [args.size]


class Progress:
    """A progress bar on stderr, only when it is a terminal."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.enabled = sys.stderr.isatty()

    def step(self, n: int) -> None:
        self.done += n
        if self.enabled:
            filled = int(30 * self.done / max(self.total, 1))
            sys.stderr.write(f"\r[{'#' * filled}{' ' * (30 - filled)}] {self.done}/{self.total}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 60 + "\r")


def main(args: Any) -> int:
    """Run the benchmark described by parsed ``fabricctl bench`` arguments."""
    if args.initiator and any(args.daemon_cpus):
        print(
            "fabricctl bench: --daemon-cpus pins the daemons a run starts; running nodes"
            " (--initiator) keep the CPUs their own fabricd --cpus gave them",
            file=sys.stderr,
        )
        return 2
    if args.op in ("connect", "scale"):
        return connections_main(args)
    limits: dict[str, float] = {}
    if not args.no_limits:
        from bench.limits import measure as measure_limits

        limits = measure_limits(seconds=args.limit_seconds).to_json()
    sizes = sizes_for(args)
    plan = [(s, args.iters or default_iters(s, args.mode)) for s in sizes]
    progress = Progress(sum(n for _, n in plan))
    if not args.json:
        print(
            header(
                args.op,
                args.mode,
                args.window,
                args.same_node,
                limits,
                args.cq_mod,
                args.warmup,
                args.daemon_cpus,
            )
        )
    with fabric_for(args) as fabric:
        session = Session(fabric, args.op, max(sizes), args.window)
        try:
            for size, iters in plan:
                result = measure(
                    session,
                    args.op,
                    args.mode,
                    size,
                    iters,
                    args.window,
                    args.same_node,
                    progress.step,
                    args.poll,
                    args.cq_mod,
                    args.warmup,
                )
                result.daemon_cpus = args.daemon_cpus
                if args.verify:
                    session.verify(args.op, size)
                if args.json:
                    print(json.dumps(result.to_json(limits)), flush=True)
                else:
                    progress.close()
                    print(row(result, limits), flush=True)
        finally:
            sent = hashlib.sha256(bytes(session.buf.view[: sizes[-1]])).hexdigest()
            report = session.close()
    progress.close()
    if args.verify and args.op == "send" and report.get("last_digest") != sent:
        print("send: the last message did not arrive intact", file=sys.stderr)
        return 1
    if not args.json:
        print(LINE)
    return 0
