"""Where the time of an operation goes: wall time per operation beside the CPU time (user and
kernel) each process spends on it, how often each sleeps (wake-ups) and is preempted, what the
daemon's intake did (how many requests a look at the send queue took, how many of those looks
doorbells started), and a bare consumer-daemon call round trip (``python -m bench.breakdown
[--op write|read|send] [--size 64] [--iters 5000] [--window 1] [--cq-mod 1]``; the receiving
consumer counts for Sends; ``--cq-mod N``: the run at ``--window`` signals one request in N, as
``fabricctl bench --cq-mod`` does). ``--perf``: each process's CPU per operation split by the
code it ran (the kernel, the interpreter, the native modules, uvloop, msgpack, the project's
C, a C program's provider, libc: bench.perfsplit, ``perf record`` over the measured run,
``--driver c``'s too; needs perf and the right to use it, else exit 2). ``--placement``: where
the kernel ran each process over the measured run, as shares of the samples that found it
runnable, per CPU (bench.placement, a sampling process of its own: it takes some CPU of the
machine too).

``--driver c``: a C program through libdatfabric (provider/bench/post_reap.c, RDMA Writes or
Sends (``--op``), polling): the CPU inside each post and inside the dequeue that returns its
completion, at window 64 (one request in ``--cq-mod`` signalled) and at window 1, then what
the program and each daemon spent per operation."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import fields
from typing import Any

from bench import cdriver, perfsplit
from bench.fabric import Session
from bench.limits import PACE_LOOP, pace
from bench.nodes import Fabric, add_daemon_cpus, cpus_args
from bench.perftest import at_least_one, moderation
from bench.placement import Placement
from bench.proc import usage
from client.faults import Faults
from fabricd.launch import start_node
from fabricd.nic.intake import IntakeCounts

CHUNKS = 8  # post_reap's chunks: the least disturbed one counts
ROUNDS = 400  # windows posted and reaped in all
WAIT_S = 10.0  # for a window's completions, before post_reap gives up


def main(argv: list[str] | None = None) -> None:
    """Measure and print the breakdown."""
    p = argparse.ArgumentParser(prog="python -m bench.breakdown")
    p.add_argument("--op", choices=["write", "read", "send"], default="write")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--iters", type=int, default=5000)
    p.add_argument("--window", type=int, default=1)
    p.add_argument("--driver", choices=["python", "c"], default="python")
    p.add_argument("--cq-mod", type=at_least_one, default=1, help="signal one request in N")
    p.add_argument("--perf", action="store_true", help="split each process's CPU by code (perf)")
    p.add_argument("--placement", action="store_true", help="sample which CPU each process ran on")
    add_daemon_cpus(p, "the two daemons")
    args = p.parse_args(argv)
    if args.perf and shutil.which("perf") is None:
        p.error("--perf needs perf (Debian's linux-perf)")
    try:
        measure(p, args)
    except perfsplit.PerfFailed as err:  # the nodes have stopped on the way out
        print(err, file=sys.stderr)
        sys.exit(2)


def measure(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The breakdown ``args`` ask for, printed (``p``: their parser, for their errors)."""
    if args.driver == "c":
        if args.op not in cdriver.OPS:
            p.error(f"--driver c runs {' and '.join(cdriver.OPS)}")
        c_driver(args.size, args.iters, args.op, args.cq_mod, args.daemon_cpus, args.perf)
        return
    with tempfile.TemporaryDirectory(prefix="datfabric-breakdown-") as tmp:
        a = start_node("bd-a", os.path.join(tmp, "a.sock"), extra=cpus_args(args.daemon_cpus[0]))
        b = start_node("bd-b", os.path.join(tmp, "b.sock"), extra=cpus_args(args.daemon_cpus[1]))
        try:
            fabric, window = Fabric(a.socket, b.socket, b.address), args.window
            session = Session(fabric, args.op, args.size, window)
            session.run(args.op, args.size, 500, window, lambda _: None)  # warm up
            pids = {"consumer": os.getpid(), "its daemon": a.proc.pid, "peer daemon": b.proc.pid}
            if args.op == "send":
                pids["peer consumer"] = session.target.pid
            nodes = Faults({"a": a.socket, "b": b.socket})
            counted = [nodes.status(n) for n in "ab"]
            path = os.path.join(tmp, "perf.data")
            where = Placement(pids) if args.placement else None
            with (
                perfsplit.Recording(path) if args.perf else contextlib.nullcontext() as recording,
                where or contextlib.nullcontext(),
            ):
                if recording is not None:
                    recording.resume()
                before = {name: usage(pid) for name, pid in pids.items()}
                elapsed, lat, _ = session.run(
                    args.op, args.size, args.iters, window, lambda _: None, cq_mod=args.cq_mod
                )
                after = {name: usage(pid) for name, pid in pids.items()}
                shares = recording.stop() if recording is not None else {}
            mod = moderation(args.cq_mod, window)
            print(
                f"{args.size} B {args.op}, window {window}: {args.iters / elapsed:,.0f} op/s,"
                f" median {statistics.median(lat):.0f} us from post to completion"
                + (f" (one in {mod} signalled)" if mod > 1 else "")
            )
            for name in pids:
                print(after[name].line(name, before[name], args.iters))
            for text in perfsplit.lines(pids, before, after, shares, args.iters):
                print(text)
            if where is not None:
                print(where.line())
            print(intake(counted, [nodes.status(n) for n in "ab"]))
            before_us = pace()
            post_us, reap_us = post_reap(session, args.op, args.size, window)
            print(
                f"  the client's CPU per operation: post {post_us:.2f} us, reap {reap_us:.2f} us"
                f" (the dequeue that returns it), sum {post_us + reap_us:.2f} us"
                f" (best of {CHUNKS} chunks of {ROUNDS // CHUNKS} windows); this machine's"
                f" pace: {PACE_LOOP:,} additions in {before_us:.0f} and {pace():.0f} us of CPU"
                " before and after"
            )
            calls = []
            for _ in range(2000):
                t0 = time.perf_counter()
                session.ia.query()
                calls.append(time.perf_counter() - t0)
            print(f"  consumer-daemon call round trip: {statistics.median(calls) * 1e6:.0f} us")
            session.close()
        finally:
            a.stop()
            b.stop()


def intake(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> str:
    """What the daemons' intake did over the run (``fabricctl node status``'s counts): how
    many requests each look at the send queue took, how many of those looks a doorbell
    started; the peer's doorbells are its consumer's receives (Sends)."""
    pairs = zip(before, after, strict=True)
    counts = [f.name for f in fields(IntakeCounts)]
    its, peer = ({k: now[k] - then[k] for k in counts} for then, now in pairs)
    each = its["requests"] / its["takes"] if its["takes"] else 0.0
    return (
        f"  its daemon's intake: {its['requests']:,} requests in {its['takes']:,} takes"
        f" ({each:.1f} each), {its['doorbells']:,} doorbells, {its['busy_polls']:,} busy polls"
        f" ({its['busy_looks']:,} empty looks); the peer daemon's doorbells: {peer['doorbells']:,}"
    )


def post_reap(session: Session, op: str, size: int, window: int) -> tuple[float, float]:
    """The Python client's CPU inside a post and inside the dat_evd_dequeue that returns its
    completion (microseconds, each the best chunk's mean): a window posted, its completions
    left to arrive (untimed), then dequeued (the first dequeue reads the ring). Each window's
    posts and each window's dequeues are timed together with the thread's CPU clock (one
    reading costs ~0.6 us, too much to take per call): a doorbell whose wake-up preempts the
    poster (the daemon then runs on its core) does not count as the post's."""
    post, evd, cpu = session.poster(op, size), session.evd, time.thread_time
    ring = session.ia.core.evds[evd.handle].ring
    assert ring is not None
    best = [float("inf"), float("inf")]
    for _ in range(CHUNKS):
        posting = reaping = 0.0
        for _ in range(ROUNDS // CHUNKS):
            t0 = cpu()
            for cookie in range(window):
                post(cookie, 0)
            posting += cpu() - t0
            session.ia.kick()  # a doorbell a race skipped: not part of any one post
            deadline = time.perf_counter() + WAIT_S
            while ring.available() < window:  # reading the entries is the dequeues' work
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{window} completions did not come in {WAIT_S} s")
            t0 = cpu()
            for _ in range(window):
                evd.dequeue()
            reaping += cpu() - t0
        n = ROUNDS // CHUNKS * window
        best = [min(best[0], posting / n * 1e6), min(best[1], reaping / n * 1e6)]
    return best[0], best[1]


def c_driver(
    size: int,
    iters: int,
    op: str = "write",
    cq_mod: int = 1,
    cpus: tuple[str, str] = ("", ""),
    perf: bool = False,
) -> None:
    """provider/bench/post_reap's figures: the C driver's CPU inside a post and inside the
    dequeue that returns its completion, at window 64 (one request in ``cq_mod`` signalled)
    and at window 1, each followed by what the program and both daemons spent per
    operation (the daemons pinned as ``cpus`` says: cdriver.nodes), split by code (``perf``;
    PerfFailed if perf failed)."""
    try:
        with cdriver.nodes(cpus) as pair, tempfile.TemporaryDirectory() as tmp:
            for window, count in ((64, iters * 20), (1, iters)):
                mod = moderation(cq_mod, window)
                data = os.path.join(tmp, f"perf-{window}.data") if perf else ""
                print(
                    cdriver.post_reap(
                        pair.conf, size, window, count, 600, pair.daemons, op, mod, data
                    )
                )
    except cdriver.Unavailable as err:
        print(err, file=sys.stderr)


if __name__ == "__main__":
    main()
