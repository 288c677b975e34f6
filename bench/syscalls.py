"""A window-1 round trip at the system calls: when each daemon wrote to its peer, woke, read
its answer and wrote again, from the kernel's trace points, so nothing in the daemons is
wrapped (bench.timeline's trace points cost a few microseconds each and slow what they show).

    python -m bench.syscalls [--op write|read] [--size 64] [--seconds 1.0]

It starts two daemons and a session (bench.fabric), measures the median post-to-completion
latency of window-1 operations untraced, then runs them again while ``perf record`` traces
both daemons' write, read, epoll_pwait and sched_yield calls for ``--seconds``, and prints
each stage of a round trip (the median and mean over every round trip whose stages were all
seen, in order) beside bench.limits' request-reply RTT measured in the same run:

- a hop: a daemon's write to its peer, the loopback's delivery and the other daemon's wake-up
  (its epoll_pwait returns), then its loop's dispatch and the read;
- a daemon's turn: from that read to its own write to the peer (the target's lane and ACK;
  the initiator's retire, the consumer's next post, the look that takes it), with how many
  loop iterations it ran without sleeping (epoll_pwait with no timeout) and sched_yields;
- the initiator's turn split by the consumer (this process, traced too): it spins, with a
  ``sched_yield`` between looks, while it waits, so the longest pause in its yields inside
  that turn is its completion taken, its next request posted and its next wait begun; before
  it, the daemon's retire and the consumer's last look; after it, the daemon's look that takes
  the request and writes its frame.

Needs ``perf`` (Debian's linux-perf) and the right to trace (root, or perf_event_paranoid
-1); without them it says why and exits 2. The trace points add about a microsecond each.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from bench.fabric import Session
from bench.limits import measure_request_reply
from bench.nodes import Fabric, add_daemon_cpus, cpus_args
from fabricd.launch import start_node

POINTS: Final = (
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_read",
    "syscalls:sys_exit_read",
    "syscalls:sys_enter_epoll_pwait",
    "syscalls:sys_exit_epoll_pwait",
    "syscalls:sys_enter_sched_yield",
)
_LINE: Final = re.compile(r"\s*(\d+)\s+([\d.]+):\s+syscalls:sys_(\w+):\s*(.*)")
_FIELD: Final = re.compile(r"(\w+): (0x[0-9a-f]+)")


@dataclass(frozen=True, slots=True)
class Call:
    """One traced system call of a daemon: ``what`` is write (to ``fd``), read (``fd``, bytes
    read in ``n``), sleep / poll (epoll_pwait with a timeout / none), woke (epoll_pwait
    returned after a sleep) or yield; ``at`` in microseconds."""

    at: float
    pid: int
    what: str
    fd: int = -1
    n: int = 0


def parse(lines: Iterable[str]) -> list[Call]:
    """``perf script -F pid,time,event,trace`` of POINTS as Calls, in order (a read's fd
    comes from its entry, its byte count from its exit; a wake-up is the return of an
    epoll_pwait that could sleep)."""
    calls: list[Call] = []
    reading: dict[int, int] = {}
    sleeping: dict[int, bool] = {}
    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        pid, at, point = int(m[1]), float(m[2]) * 1e6, m[3]
        f = {k: int(v, 16) for k, v in _FIELD.findall(m[4])}
        if point == "enter_write":
            calls.append(Call(at, pid, "write", f.get("fd", -1), f.get("count", 0)))
        elif point == "enter_read":
            reading[pid] = f.get("fd", -1)
        elif point == "exit_read" and pid in reading:
            ret = int(m[4].split()[0], 16) if m[4].startswith("0x") else 0  # its return, bare
            calls.append(Call(at, pid, "read", reading.pop(pid), ret if ret < 1 << 63 else 0))
        elif point == "enter_epoll_pwait":
            sleeping[pid] = f.get("timeout", 0) != 0
            calls.append(Call(at, pid, "sleep" if sleeping[pid] else "poll"))
        elif point == "exit_epoll_pwait" and sleeping.pop(pid, False):
            calls.append(Call(at, pid, "woke"))
        elif point == "enter_sched_yield":
            calls.append(Call(at, pid, "yield"))
    return calls


STAGES: Final = (
    ("initiator's daemon writes the request", "target's daemon wakes"),
    ("target's daemon wakes", "it has read the request"),
    ("it has read the request", "it writes its answer"),
    ("it writes its answer", "initiator's daemon wakes"),
    ("initiator's daemon wakes", "it has read the answer"),
    ("it has read the answer", "it writes the next request"),
)
SPLIT: Final = (
    ("  of which: it has read the answer", "the consumer's last look before it"),
    ("  the consumer takes its completion", "posts, and waits again"),
    ("  the consumer waits again", "the daemon writes the request"),
)
"""The initiator's turn (the last of STAGES) split where the consumer's yields pause."""


@dataclass
class RoundTrips:
    """The stages of the complete round trips (microseconds each), and what each daemon's
    turn held: loop iterations that did not sleep, and sched_yields, per round trip."""

    stages: list[list[float]] = field(default_factory=lambda: [[] for _ in STAGES])
    split: list[list[float]] = field(default_factory=lambda: [[] for _ in SPLIT])
    whole: list[float] = field(default_factory=list)
    polls: Counter[str] = field(default_factory=Counter)
    yields: Counter[str] = field(default_factory=Counter)
    writes: int = 0  # the initiator's writes to its peer: round trips begun

    @property
    def count(self) -> int:
        return len(self.whole)


def _peer_fd(calls: Sequence[Call], pid: int) -> int:
    """The fd a daemon writes to most: its peer's stream, at window 1."""
    fds = Counter(c.fd for c in calls if c.pid == pid and c.what == "write")
    return fds.most_common(1)[0][0] if fds else -1


def _split(yields: Sequence[float], read: float, write: float) -> tuple[float, float, float] | None:
    """The initiator's turn from ``read`` to ``write`` split at the longest pause between the
    consumer's yields (``yields``, in order; the last one before ``read`` starts a pause);
    None when it did not yield in the turn."""
    start = bisect.bisect_right(yields, read)
    end = bisect.bisect_right(yields, write)
    if start == end:
        return None
    looks = [*yields[max(start - 1, 0) : start], *yields[start:end]]
    if len(looks) < 2:
        return None
    gap = max(range(1, len(looks)), key=lambda i: looks[i] - looks[i - 1])
    paused, resumed = max(looks[gap - 1], read), looks[gap]
    return paused - read, resumed - paused, write - resumed


def round_trips(
    calls: Sequence[Call], initiator: int, target: int, consumer: int = 0
) -> RoundTrips:
    """Each round trip from one write of the initiator's daemon to its peer to the next: the
    target's daemon wakes, reads, writes; the initiator's wakes, reads, writes again. A round
    trip counts only when every stage came, in that order; its last stage is split by the
    ``consumer``'s yields (``_split``) when it is given."""
    yields_of_consumer = [c.at for c in calls if c.pid == consumer and c.what == "yield"]
    fd = {initiator: _peer_fd(calls, initiator), target: _peer_fd(calls, target)}
    order = (
        (target, "woke"),
        (target, "read"),
        (target, "write"),
        (initiator, "woke"),
        (initiator, "read"),
        (initiator, "write"),
    )
    out = RoundTrips()
    marks: list[float] = []  # the times of this round trip's stages so far
    polls: Counter[str] = Counter()
    yields: Counter[str] = Counter()
    for c in calls:
        side = "initiator" if c.pid == initiator else "target" if c.pid == target else ""
        if not side:
            continue
        if c.what == "poll":
            polls[side] += 1
        elif c.what == "yield":
            yields[side] += 1
        if c.what in ("read", "write") and (c.fd != fd[c.pid] or (c.what == "read" and c.n <= 0)):
            continue  # another stream's, or a read that found nothing
        if c.pid == initiator and c.what == "write":
            out.writes += 1
            if len(marks) == len(order):  # the next request: a round trip is complete
                times = [*marks, c.at]
                for i in range(len(STAGES)):
                    out.stages[i].append(times[i + 1] - times[i])
                out.whole.append(c.at - marks[0])
                parts = _split(yields_of_consumer, marks[-1], c.at) if consumer else None
                for values, part in zip(out.split, parts or (), strict=False):
                    values.append(part)
                out.polls.update(polls)
                out.yields.update(yields)
            marks, polls, yields = [c.at], Counter(), Counter()
            continue
        if marks and len(marks) < len(order) and order[len(marks) - 1] == (c.pid, c.what):
            marks.append(c.at)
    return out


def table(trips: RoundTrips, op: str, size: int, untraced: float, rtt: float) -> str:
    """The stages as a perftest-style table."""
    n = max(trips.count, 1)
    lines = [
        f"# a window-1 {op} of {size} B at the system calls: {trips.count:,} complete round"
        f" trips of {trips.writes:,} traced (perf record: both daemons, the consumer);"
        " microseconds",
        f"# untraced in the same run: median post to completion {untraced:.1f} us;"
        f" bench.limits request-reply RTT {rtt:.1f} us",
        f"  {'from':<40} {'to':<38} {'median':>7} {'mean':>7}",
    ]
    for (start, end), values in zip(STAGES, trips.stages, strict=True):
        if values:
            mid, mean = statistics.median(values), statistics.mean(values)
            lines.append(f"  {start:<40} {end:<38} {mid:7.1f} {mean:7.1f}")
    for (start, end), values in zip(SPLIT, trips.split, strict=True):
        if values:
            mid, mean = statistics.median(values), statistics.mean(values)
            lines.append(f"  {start:<40} {end:<38} {mid:7.1f} {mean:7.1f}")
    if trips.whole:
        mid, mean = statistics.median(trips.whole), statistics.mean(trips.whole)
        lines.append(f"  {'the round trip, traced':<79} {mid:7.1f} {mean:7.1f}")
    for side in ("target", "initiator"):
        lines.append(
            f"  {side}'s daemon per round trip: {trips.polls[side] / n:.2f} loop iterations"
            f" that did not sleep, {trips.yields[side] / n:.2f} sched_yields"
        )
    return "\n".join(lines)


def record(pids: Sequence[int], seconds: float, path: str) -> subprocess.Popen[bytes]:
    """``perf record`` of POINTS in ``pids`` for ``seconds``, into ``path``."""
    events = [arg for point in POINTS for arg in ("-e", point)]
    cmd = ["perf", "record", "-q", "-o", path, *events, "-p", ",".join(map(str, pids))]
    return subprocess.Popen(
        [*cmd, "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def main(argv: list[str] | None = None) -> None:
    """Trace and print the stages."""
    p = argparse.ArgumentParser(prog="python -m bench.syscalls", description=__doc__.split("\n")[0])
    p.add_argument("--op", choices=["write", "read"], default="write")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--seconds", type=float, default=1.0, help="how long perf records")
    add_daemon_cpus(p, "the two daemons")
    args = p.parse_args(argv)
    if shutil.which("perf") is None:
        print("bench.syscalls needs perf (Debian's linux-perf)", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="datfabric-syscalls-") as tmp:
        a = start_node("sc-a", os.path.join(tmp, "a.sock"), extra=cpus_args(args.daemon_cpus[0]))
        b = start_node("sc-b", os.path.join(tmp, "b.sock"), extra=cpus_args(args.daemon_cpus[1]))
        try:
            session = Session(Fabric(a.socket, b.socket, b.address), args.op, args.size, 1)
            session.run(args.op, args.size, 1000, 1, lambda _: None)  # warm up
            _, lat, _ = session.run(args.op, args.size, 3000, 1, lambda _: None)
            data = os.path.join(tmp, "perf.data")
            perf = record([a.proc.pid, b.proc.pid, os.getpid()], args.seconds, data)
            while perf.poll() is None:
                session.run(args.op, args.size, 200, 1, lambda _: None)
            _, err = perf.communicate()
            session.close()
        finally:
            a.stop()
            b.stop()
        if perf.returncode != 0 or not os.path.exists(data):
            print(f"perf record failed: {err.decode(errors='replace').strip()}", file=sys.stderr)
            sys.exit(2)
        script = subprocess.run(
            ["perf", "script", "-i", data, "-F", "pid,time,event,trace"],
            capture_output=True,
            text=True,
            check=True,
        )
    trips = round_trips(parse(script.stdout.splitlines()), a.proc.pid, b.proc.pid, os.getpid())
    rtt, _ = measure_request_reply(1.0)
    print(table(trips, f"RDMA {args.op.capitalize()}", args.size, statistics.median(lat), rtt))


if __name__ == "__main__":
    main()
