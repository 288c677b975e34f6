"""One stretch of a benchmark as a timeline, process by process: when the consumer waited for
completions, and when each daemon read, looked at a send queue, took WQEs, sent a batch,
landed one, acknowledged and retired requests, merged by the monotonic clock they share.

    python -m bench.timeline [--op write] [--size 4096] [--window 64] [--cq-mod 16]
        [--iters 400000] [--at 1.5] [--span 30] [--rows 80] [--daemon-cpus I:T]

It starts two daemons with trace points (POINTS: methods of the NIC core and its streams,
wrapped in their own processes as they start), runs ``fabricctl bench`` through them from this
process (its dat_evd_wait traced), records for --span milliseconds from --at seconds after the
bench starts, and prints --rows lines from the middle of that stretch: microseconds from its
start, the process (C the consumer, I the initiator's daemon, T the target's), what happened.
A trace point costs a few microseconds, so the stretch runs slower than an untraced run: it
shows the order of things and where a process waits, not figures.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV = "DATFABRIC_TIMELINE"  # a daemon's: "STRETCH_FILE TRACE_FILE" (bench.timeline sets it)

Describe = Callable[..., str | None]  # the call's arguments (and result) -> a line, or None


@dataclass(frozen=True)
class Point:
    """A trace point: ``module.owner.name`` (owner "" for a module's function), described
    from its arguments before the call, or (``after``) from its result and arguments."""

    module: str
    owner: str
    name: str
    describe: Describe
    after: bool = False


@dataclass
class Recorder:
    """What happened between ``start`` and ``end`` (monotonic ns), saved to ``path`` once."""

    start: int
    end: int
    path: str
    clock: Callable[[], int] = time.monotonic_ns  # one clock for every process on the host
    rows: list[tuple[int, str]] = field(default_factory=list)
    saved: bool = False

    def __call__(self, what: str) -> None:
        now = self.clock()
        if now < self.start or self.saved:
            return
        if now > self.end:
            self.save()
            return
        self.rows.append((now, what))

    def save(self) -> None:
        """Write the rows (once: the first record past the end, or at exit)."""
        if not self.saved:
            self.saved = True
            Path(self.path).write_text("".join(f"{t} {what}\n" for t, what in self.rows))


def _outstanding(result: object, intake: Any, ep: Any) -> str:
    return f"retired: {len(ep.ops)} outstanding"


def _took(result: tuple[int, bool], *_: Any) -> str | None:
    return f"took {result[0]} WQEs" if result[0] else None


def _batch(result: tuple[bytes, list[memoryview]], ep: Any) -> str:
    views = result[1]
    return f"sends a batch of {len(views)} ({sum(map(len, views))} B)"


def _flush(stream: Any) -> str | None:
    out = stream._out
    return f"writes {sum(map(len, out))} B to the {stream.kind}" if out else None


def _look(intake: Any, ep: Any, *_: Any) -> str:
    q = ep.queues
    return f"looks at EP {ep.handle}: {q.sq.available() if q is not None else 0} new WQEs"


def _ack_out(target: Any, link: Any) -> str | None:
    return f"acknowledges up to {link.acked}" if link.ack_due else None


POINTS: tuple[Point, ...] = (
    Point("fabricd.streams", "PeerStream", "buffer_updated", lambda s, n: f"reads {n} B (peer)"),
    Point("fabricd.streams", "ConsumerStream", "buffer_updated", lambda s, n: f"reads {n} B"),
    Point("fabricd.streams", "PeerStream", "_flush", _flush),
    Point("fabricd.streams", "ConsumerStream", "_flush", _flush),
    Point("fabricd.nic.intake", "Intake", "doorbell", lambda *_: "doorbell"),
    Point("fabricd.nic.intake", "Intake", "drain", _look),
    Point("fabricd.nic.intake", "Intake", "retired", _outstanding, after=True),
    Point("fabricd.nic.initiator", "Initiator", "post_plain", _took, after=True),
    Point("fabricd.nic.initiator", "", "take_batch", _batch, after=True),
    Point("fabricd.nic.initiator", "Initiator", "ack", lambda s, ep, seq: f"ACK {seq}"),
    Point(
        "fabricd.nic.target",
        "Target",
        "sink",
        lambda s, link, f: f"{f.type.name} {f.fields[0]} lands {f.payload_len} B",
    ),
    Point("fabricd.nic.target", "Target", "batch_end", _ack_out),
)
CONSUMER = (
    Point("client.handles_evd", "Evd", "wait", lambda *_: "waits"),
    Point("client.handles_evd", "Evd", "wait", lambda r, *_: f"has {1 + r[1]} events", True),
)


def install(points: Sequence[Point], record: Callable[[str], None]) -> None:
    """Wrap each point's function (in its class, or its module) so that it records."""
    for point in points:
        home: Any = importlib.import_module(point.module)
        if point.owner:
            home = getattr(home, point.owner)
        setattr(home, point.name, _traced(getattr(home, point.name), point, record))


def _traced(fn: Callable[..., Any], point: Point, record: Callable[[str], None]) -> Any:
    describe, after = point.describe, point.after

    def traced(*args: Any, **kwargs: Any) -> Any:
        if not after:
            what = describe(*args)
            if what is not None:
                record(what)
        result = fn(*args, **kwargs)
        if after:
            what = describe(result, *args)
            if what is not None:
                record(what)
        return result

    return traced


def merge(traces: Sequence[tuple[str, str]], start: int) -> list[str]:
    """The rows of ``(tag, path)`` traces in time order, as "µs tag what" lines (a process
    that passed no trace point in the stretch left no file)."""
    rows: list[tuple[int, str, str]] = []
    for tag, path in traces:
        if not Path(path).exists():
            continue
        for line in Path(path).read_text().splitlines():
            t, _, what = line.partition(" ")
            rows.append((int(t), tag, what))
    rows.sort()
    return [f"{(t - start) / 1e3:10.1f}  {tag}  {what}" for t, tag, what in rows]


def middle(lines: list[str], count: int) -> list[str]:
    """``count`` lines from the middle of ``lines``."""
    first = max(0, (len(lines) - count) // 2)
    return lines[first : first + count]


@contextlib.contextmanager
def traced_nodes(
    tmp: str,
    module: str = "bench.timeline",
    env: str = ENV,
    suffix: str = "trace",
    cpus: tuple[str, str] = ("", ""),
) -> Iterator[tuple[Any, Any]]:
    """The initiator's and the target's daemons, started by ``module`` (its ``env`` names
    the stretch file and the daemon's own), each to write into ``tmp``/NAME.``suffix`` what
    it records of the stretch that ``tmp``/stretch will name (``open_stretch``); ``cpus``:
    their CPU lists (``--daemon-cpus``), "" unpinned. Their core runs from its sources
    (proto.native): a compiled caller would not call the wrapped functions."""
    from bench.nodes import cpus_args
    from fabricd.launch import start_node
    from proto import native

    nodes = []
    interpreted = os.environ.get(native.ENV)
    os.environ[native.ENV] = "1"
    try:
        for name, pinned in zip(("a", "b"), cpus, strict=True):
            os.environ[env] = f"{tmp}/stretch {tmp}/{name}.{suffix}"
            tag = module.rpartition(".")[2]
            nodes.append(
                start_node(
                    f"{tag}-{name}", f"{tmp}/{name}.sock", module=module, extra=cpus_args(pinned)
                )
            )
        yield nodes[0], nodes[1]
    finally:
        os.environ.pop(env, None)
        if interpreted is None:
            os.environ.pop(native.ENV, None)
        else:
            os.environ[native.ENV] = interpreted
        for node in nodes:
            node.stop()


def open_stretch(tmp: str, at: float, span_ms: float) -> tuple[int, int]:
    """Name the stretch, ``at`` seconds from now for ``span_ms`` milliseconds, to the daemons
    (``tmp``/stretch, written whole); its start and end (monotonic ns)."""
    start = time.monotonic_ns() + int(at * 1e9)
    end = start + int(span_ms * 1e6)
    Path(f"{tmp}/stretch.new").write_text(f"{start} {end}")
    os.replace(f"{tmp}/stretch.new", f"{tmp}/stretch")
    return start, end


def stretch_named(path: str) -> tuple[int, int] | None:
    """The stretch ``open_stretch`` wrote to ``path``, or None while it has not."""
    try:
        start, end = map(int, Path(path).read_text().split())
    except (OSError, ValueError):
        return None
    return start, end


def bench_argv(args: argparse.Namespace, a: Any, b: Any) -> list[str]:
    """``fabricctl bench``'s arguments for the run ``args`` describe, through nodes a and b."""
    argv = ["bench", "--no-limits", "--json", "--op", args.op, "--size", str(args.size)]
    argv += ["--window", str(args.window), "--iters", str(args.iters)]
    argv += ["--cq-mod", str(args.cq_mod), "--initiator", a.socket, "--target", b.socket]
    return [*argv, "--target-address", f"{b.host}:{b.port}"]


def bench_arguments(
    parser: argparse.ArgumentParser, size: int, window: int, cq_mod: int, iters: int, at: float,
    span: float,
) -> None:  # fmt: skip
    """The run's arguments (--op, --size, --window, --cq-mod, --iters, --daemon-cpus) and its
    stretch's (--at, --span), with these defaults."""
    from bench.nodes import add_daemon_cpus

    parser.add_argument("--op", choices=["write", "read", "send"], default="write")
    parser.add_argument("--size", type=int, default=size)
    parser.add_argument("--window", type=int, default=window)
    parser.add_argument("--cq-mod", type=int, default=cq_mod)
    parser.add_argument("--iters", type=int, default=iters)
    parser.add_argument("--at", type=float, default=at, help="seconds into the bench")
    parser.add_argument("--span", type=float, default=span, help="milliseconds recorded")
    add_daemon_cpus(parser, "the two traced daemons")


def placement(a: Any, b: Any) -> str:
    """Where the kernel may run the two daemons (their CPU affinity, read from each), as a
    header line."""
    where = [",".join(map(str, sorted(os.sched_getaffinity(n.proc.pid)))) for n in (a, b)]
    return f"# daemons on CPUs: the initiator's {where[0]}, the target's {where[1]}"


def run(args: argparse.Namespace) -> int:
    """Trace one stretch of the benchmark the arguments describe and print it."""
    from bench.fabric import main as bench_main
    from tools.ctl import build_parser

    with tempfile.TemporaryDirectory(prefix="datfabric-timeline-") as tmp:
        with traced_nodes(tmp, cpus=args.daemon_cpus) as (a, b):
            where = placement(a, b)
            start, end = open_stretch(tmp, args.at, args.span)
            record = Recorder(start, end, f"{tmp}/c.trace")
            install(CONSUMER, record)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                bench_main(build_parser().parse_args(bench_argv(args, a, b)))
        record.save()
        if time.monotonic_ns() < end:
            print("the benchmark ended before the stretch did: raise --iters", file=sys.stderr)
            return 1
        lines = merge(
            [("C", f"{tmp}/c.trace"), ("I", f"{tmp}/a.trace"), ("T", f"{tmp}/b.trace")], start
        )
    if not lines:
        print("no process passed a trace point in the stretch: the benchmark was still setting"
              " up (raise --at)", file=sys.stderr)  # fmt: skip
        return 1
    mbps = json.loads(out.getvalue().splitlines()[-1])["bw_MBps"]
    print(f"# {args.op} {args.size} B, window {args.window}, one in {args.cq_mod} signalled,")
    print(f"# traced: {mbps * 1e6 / args.size:,.0f} operations/s ({mbps:,.1f} MB/s);")
    print(where)
    print(f"# {len(lines)} events in {args.span:g} ms, the middle {min(args.rows, len(lines))}:")
    print("\n".join(middle(lines, args.rows)))
    return 0


def daemon() -> None:
    """A fabricd started by ``traced_nodes``: trace points in, then the daemon as always. Its
    recorder starts once the stretch file is there (written as the benchmark begins)."""
    stretch, path = os.environ[ENV].split(" ", 1)
    recorders: list[Recorder] = []

    def record(what: str) -> None:
        if not recorders:
            named = stretch_named(stretch)
            if named is None:
                return  # not yet
            recorders.append(Recorder(*named, path))
            atexit.register(recorders[0].save)
        recorders[0](what)

    install(POINTS, record)
    from fabricd.cli import main

    main(sys.argv[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timeline", description=__doc__)
    bench_arguments(parser, size=4096, window=64, cq_mod=16, iters=400_000, at=1.5, span=30.0)
    parser.add_argument("--rows", type=int, default=80, help="lines printed")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    if ENV in os.environ:
        daemon()
    else:
        sys.exit(main())
