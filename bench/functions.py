"""Where each daemon's time goes, function by function: the calls and the inclusive
microseconds per operation of the daemon's hot functions (FUNCTIONS), over a stretch of a
benchmark.

    python -m bench.functions [--op write] [--size 64] [--window 1] [--cq-mod 1]
        [--iters 60000] [--at 3] [--span 2000] [--daemon-cpus I:T]

It starts two daemons with each function in FUNCTIONS wrapped with a clock as they start,
runs ``fabricctl bench`` through them (as bench.timeline does), and has each daemon add up the
calls it began in the stretch of --span milliseconds from --at seconds into the bench, divided
by the operations completed in it (the bench's completions, times --cq-mod). A row's
time holds its callees' (rows nest; they do not add up), each wrapped call adds the clock's
own cost to the rows above it (~1 us on this VM), and the run is that much slower than an
unwrapped one: read the rows against each other, and against bench.breakdown's CPU per
operation, not as figures of their own.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.timeline import (
    bench_arguments,
    bench_argv,
    open_stretch,
    placement,
    stretch_named,
    traced_nodes,
)

ENV = "DATFABRIC_FUNCTIONS"  # a daemon's: "STRETCH_FILE SUMS_FILE" (bench.functions sets it)

FUNCTIONS: tuple[tuple[str, str, str], ...] = (
    ("fabricd.streams", "PeerStream", "buffer_updated"),
    ("fabricd.streams", "ConsumerStream", "buffer_updated"),
    ("fabricd.streams", "_Stream", "_flush"),
    ("fabricd.turn", "Turn", "end"),
    ("fabricd.nic.lane", "", "answer"),
    ("fabricd.nic.lane", "", "take_acks"),
    ("fabricd.nic.lane", "", "land"),
    ("fabricd.nic.hub", "Nic", "peer_frame"),
    ("fabricd.nic.intake", "Intake", "doorbell"),
    ("fabricd.nic.intake", "Intake", "poll"),
    ("fabricd.nic.intake", "Intake", "retired"),
    ("fabricd.nic.initiator", "Initiator", "post_plain"),
    ("fabricd.nic.initiator", "Initiator", "transmit"),
    ("fabricd.nic.initiator", "Initiator", "ack"),
    ("fabricd.nic.initiator", "Initiator", "retire"),
    ("fabricd.nic.events", "Events", "rows_done"),
    ("fabricd.nic.events", "Events", "flush"),
    ("fabricd.nic.target", "Target", "batch_end"),
)
"""(module, class or "" for a module's function, name): looked up by attribute at each call
(the hub's frame table is built after the daemon wraps them)."""

Sums = dict[str, list[int]]  # "Owner.name" -> [calls, nanoseconds]


def install(
    functions: tuple[tuple[str, str, str], ...], sums: Sums, counting: Callable[[], bool]
) -> None:
    """Wrap each function so that a call begun while ``counting()`` adds to its sums."""
    for module, owner, name in functions:
        home: Any = importlib.import_module(module)
        if owner:
            home = getattr(home, owner)
        key = f"{owner or module.rpartition('.')[2]}.{name}"
        setattr(home, name, _clocked(getattr(home, name), sums.setdefault(key, [0, 0]), counting))


def _clocked(fn: Callable[..., Any], row: list[int], counting: Callable[[], bool]) -> Any:
    clock = time.perf_counter_ns

    def clocked(*args: Any, **kwargs: Any) -> Any:
        if not counting():
            return fn(*args, **kwargs)
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            row[0] += 1
            row[1] += clock() - t0

    return clocked


def table(title: str, sums: Sums, operations: float) -> list[str]:
    """One daemon's rows, the most time first: calls and microseconds per operation."""
    lines = [f"{title:<34} {'calls/op':>9} {'us/op':>8}"]
    for key, (calls, ns) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
        if calls:
            lines.append(f"  {key:<32} {calls / operations:9.2f} {ns / 1e3 / operations:8.1f}")
    return lines


def count_completions(completions: list[int], start: int, end: int) -> None:
    """Count into ``completions[0]`` the completions the bench's waits (dat_evd_wait: the
    event and how many more are queued, which it takes) return in [start, end]."""
    from client.handles_evd import Evd

    wait = Evd.wait

    def counted(self: Evd, *args: Any, **kwargs: Any) -> Any:
        result = wait(self, *args, **kwargs)
        if start <= time.monotonic_ns() <= end:
            completions[0] += 1 + result[1]
        return result

    Evd.wait = counted  # type: ignore[method-assign]


def run(args: argparse.Namespace) -> int:
    """Measure one stretch of the benchmark the arguments describe and print both tables."""
    from bench.fabric import main as bench_main
    from tools.ctl import build_parser

    completions = [0]
    with tempfile.TemporaryDirectory(prefix="datfabric-functions-") as tmp:
        with traced_nodes(tmp, "bench.functions", ENV, "json", args.daemon_cpus) as (a, b):
            where = placement(a, b)
            start, end = open_stretch(tmp, args.at, args.span)
            count_completions(completions, start, end)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                bench_main(build_parser().parse_args(bench_argv(args, a, b)))
        if time.monotonic_ns() < end:
            print("the benchmark ended before the stretch did: raise --iters", file=sys.stderr)
            return 1
        sums = [json.loads(Path(f"{tmp}/{n}.json").read_text()) for n in ("a", "b")]
    rate = json.loads(out.getvalue().splitlines()[-1])["msg_rate"] * 1e6  # Mpps
    operations = completions[0] * args.cq_mod
    if not operations:
        print("no operation completed in the stretch: raise --at", file=sys.stderr)
        return 1
    print(f"# {args.op} {args.size} B, window {args.window}, one in {args.cq_mod} signalled:")
    print(f"# {rate:,.0f} operations/s wrapped; {operations:,} in the {args.span:g} ms")
    print(where)
    print("\n".join(table("the initiator's daemon", sums[0], operations)))
    print("\n".join(table("the target's daemon", sums[1], operations)))
    return 0


def daemon() -> None:
    """A fabricd started by ``run``: its functions wrapped, then the daemon as always; the
    sums are written once the stretch is over (at the first call after it, or at exit)."""
    stretch, path = os.environ[ENV].split(" ", 1)
    sums: Sums = {}
    window: list[tuple[int, int]] = []
    saved: list[bool] = []

    def save() -> None:
        if not saved:
            saved.append(True)
            Path(path).write_text(json.dumps(sums))

    def counting() -> bool:
        if not window:
            named = stretch_named(stretch)
            if named is None:
                return False
            window.append(named)
            atexit.register(save)
        now = time.monotonic_ns()
        start, end = window[0]
        if now > end:
            save()
        return start <= now <= end

    install(FUNCTIONS, sums, counting)
    from fabricd.cli import main

    main(sys.argv[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.functions", description=__doc__)
    bench_arguments(parser, size=64, window=1, cq_mod=1, iters=60_000, at=3.0, span=2000.0)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    if ENV in os.environ:
        daemon()
    else:
        sys.exit(main())
