"""A small run of ``fabricctl bench --json --verify``: it works and the bytes arrive intact.

No timing thresholds here: the figures are the benchmark's business, not the tests'.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.fabric import Session
from bench.nodes import Fabric
from bench.syscalls import STAGES
from client.records import Event
from fabricd.launch import Node
from tests.perf_runs import perf_split

KEYS = {
    "op",
    "mode",
    "size",
    "iters",
    "window",
    "same_node",
    "poll",
    "cq_mod",
    "warmup",
    "daemon_cpus",
    "bw_MBps",
    "msg_rate",
    "lat_us_p50",
    "lat_us_p99",
    "ratio",
}


def _bench(*args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-m", "tools.ctl", "bench", "--json", "--verify", "--no-limits", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("op", ["write", "read", "send"])
@pytest.mark.parametrize("same_node", [False, True])
def test_bench_bandwidth_runs_and_verifies(op: str, same_node: bool) -> None:
    extra = ["--same-node"] if same_node else []
    for size in ("7", "65536", "300000"):
        (row,) = _bench("--op", op, "--size", size, "--iters", "40", "--window", "8", *extra)
        assert set(row) >= KEYS
        expected = (op, "bw", int(size), same_node)
        assert (row["op"], row["mode"], row["size"], row["same_node"]) == expected
        assert row["warmup"] == 40  # as many as it measured (at most ucx_perftest's 10,000)
        assert isinstance(row["bw_MBps"], float) and row["bw_MBps"] > 0


def test_bench_runs_and_verifies_with_its_daemons_pinned_apart() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    pinned = [str(cpus[-1]), str(cpus[0])]
    (row,) = _bench("--size", "4096", "--iters", "40", "--window", "8", "--daemon-cpus",
                    ":".join(pinned))  # fmt: skip
    assert row["daemon_cpus"] == pinned
    assert isinstance(row["bw_MBps"], float) and row["bw_MBps"] > 0


@pytest.mark.parametrize("op", ["write", "read", "send"])
def test_bench_moderates_completions_as_perftest_does(op: str) -> None:
    """--cq-mod N: one request in N signalled, and the last (203 is no multiple of 5: a run
    whose last request went unsignalled would wait for it forever); the bytes still verify."""
    (row,) = _bench("--op", op, "--size", "4096", "--iters", "203", "--window", "16",
                    "--cq-mod", "5")  # fmt: skip
    assert (row["cq_mod"], row["iters"]) == (5, 203)
    assert isinstance(row["msg_rate"], float) and row["msg_rate"] > 0


@pytest.mark.parametrize(("cq_mod", "signalled"), [(1, 203), (5, 41), (100, 13)])
def test_a_moderated_run_is_told_of_one_request_in_n_and_the_last(
    two_nodes: tuple[Node, Node], monkeypatch: pytest.MonkeyPatch, cq_mod: int, signalled: int
) -> None:
    """The bench's loop sees exactly the signalled completions (cookies 4, 9, ... 199 and 202
    at --cq-mod 5; one in 16, the window, at 100), and every request still gets a completion
    time (the one of the signalled request that retired it)."""
    a, b = two_nodes
    session = Session(Fabric(a.socket, b.socket, b.address), "write", 64, 16)
    try:
        seen: list[int] = []
        wait, dequeue = session.evd.wait, session.evd.dequeue

        def counted_wait(timeout: int) -> tuple[Event, int]:
            event, more = wait(timeout)
            seen.append(event.cookie)
            return event, more

        def counted_dequeue() -> Event:
            event = dequeue()
            seen.append(event.cookie)
            return event

        monkeypatch.setattr(session.evd, "wait", counted_wait)
        monkeypatch.setattr(session.evd, "dequeue", counted_dequeue)
        _, lat, finished = session.run("write", 64, 203, 16, lambda _: None, cq_mod=cq_mod)
        assert len(seen) == signalled and seen[-1] == 202 and seen == sorted(seen)
        assert all(finished) and all(t > 0 for t in lat)
    finally:
        session.close()


def test_bench_moderation_is_at_most_the_window_and_none_at_window_1() -> None:
    (bw,) = _bench("--size", "64", "--iters", "100", "--window", "16", "--cq-mod", "100")
    (lat,) = _bench("--mode", "lat", "--size", "64", "--iters", "20", "--cq-mod", "8",
                    "--warmup", "0")  # fmt: skip
    assert (bw["cq_mod"], lat["cq_mod"]) == (16, 1)
    assert (bw["warmup"], lat["warmup"]) == (100, 0)
    bad = subprocess.run(
        [sys.executable, "-m", "tools.ctl", "bench", "--cq-mod", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "'0': a whole number of 1 or more" in bad.stderr


@pytest.mark.parametrize("mode", ["bw", "lat"])
def test_bench_polls_for_completions_when_asked(mode: str) -> None:
    (row,) = _bench("--op", "write", "--mode", mode, "--size", "4096", "--iters", "60", "--poll")
    assert row["poll"] is True and row["mode"] == mode
    assert isinstance(row["msg_rate"], float) and row["msg_rate"] > 0


def test_bench_latency_reports_percentiles() -> None:
    (row,) = _bench("--op", "read", "--mode", "lat", "--size", "64", "--iters", "50")
    assert row["window"] == 1
    p50, p99 = row["lat_us_p50"], row["lat_us_p99"]
    assert isinstance(p50, float) and isinstance(p99, float) and 0 < p50 <= p99


def test_bench_connection_setup_and_scale_run() -> None:
    (connect,) = _bench("--op", "connect", "--iters", "40")
    assert connect["iters"] == 40
    assert isinstance(connect["conn_per_s"], float) and connect["conn_per_s"] > 0
    (scale,) = _bench("--op", "scale", "--iters", "40")
    assert scale["writes_completed"] == 40, "a 64 B write completed on every pair"
    growth = scale["rss_growth_MB"]
    assert isinstance(growth, list) and len(growth) == 2


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started that are still there."""
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def test_a_terminated_bench_stops_the_nodes_it_started() -> None:
    """SIGTERM (a timeout, a CI runner, `kill`) ends a run as Ctrl-C does: no daemon is left."""
    run = subprocess.Popen(
        [sys.executable, "-m", "tools.ctl", "bench", "--no-limits", "--iters", "100000000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    daemons: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(daemons) < 2:
            time.sleep(0.2)
            daemons = [c for c in _children(run.pid) if b"fabricd.cli" in _cmdline(c)]
        assert len(daemons) == 2, "the run started its two nodes"
        run.send_signal(signal.SIGTERM)
        assert run.wait(30) == 128 + signal.SIGTERM
        left = [pid for pid in daemons if b"fabricd.cli" in _cmdline(pid)]
        assert left == [], "its daemons went with it"
    finally:  # whatever failed, nothing of this test keeps running
        if run.poll() is None:
            run.kill()
            run.wait()
        for pid in daemons:
            if b"fabricd.cli" in _cmdline(pid):
                os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


INTERPRETED = {**os.environ, "DATFABRIC_INTERPRETED": "1"}
"""bench.ab's own runs: its worktrees build no native modules (a minute and a half each) and
both sides run interpreted, alike (proto/native.py)."""


@pytest.mark.parametrize("after", [[], ["--after", "HEAD"]], ids=["checkout", "revision"])
def test_bench_ab_runs_a_revision_beside_another(after: list[str]) -> None:
    """python -m bench.ab: each revision runs in its own worktree (removed afterwards), both
    sides print a median, and the ratio is theirs; without --after the other side is this
    checkout."""
    before = set(subprocess.run(["git", "worktree", "list"], capture_output=True, text=True,
                                check=True).stdout.splitlines())  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "bench.ab", "HEAD", *after, "--rounds", "1",
         "--row", "--op write --size 64 --iters 300"],
        capture_output=True, text=True, timeout=300, env=INTERPRETED,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    [head] = [line for line in out.stdout.splitlines() if line.startswith("# before: HEAD (")]
    trees = [part.split(")", 1)[0] for part in head.split("(")[1:3]]
    temporary = [tree for tree in trees if "datfabric-ab-" in tree]
    assert len(temporary) == (2 if after else 1), trees
    assert not any(os.path.exists(tree) for tree in temporary), "their own trees, removed"
    [row] = [line for line in out.stdout.splitlines() if line.startswith("--op write")]
    cells = row.split()  # ... before (range) after (range) ratio
    before_rate, after_rate, ratio = float(cells[-5]), float(cells[-3]), float(cells[-1])
    assert before_rate > 0 and after_rate > 0
    assert ratio == pytest.approx(after_rate / before_rate, abs=0.01)
    now = set(subprocess.run(["git", "worktree", "list"], capture_output=True, text=True,
                             check=True).stdout.splitlines())  # fmt: skip
    assert now == before, "the worktrees are gone"


def test_bench_ab_gives_a_side_its_variables() -> None:
    """--before-env reaches the before side's bench and the daemons it starts (a value fabricd
    refuses stops its first daemon at argument parsing, exit 2), and the header shows it."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.ab", "HEAD", "--before-env", "DATFABRIC_SCHED=fifo",
         "--rounds", "1", "--row", "--op write --size 64 --iters 100"],
        capture_output=True, text=True, timeout=300, env=INTERPRETED,
    )  # fmt: skip
    assert out.returncode != 0
    assert ") DATFABRIC_SCHED=fifo; after: this checkout (" in out.stdout
    assert "fabricd bench-a did not start (exit 2)" in out.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "bench.ab", "HEAD", "--after-env", "DATFABRIC_SCHED"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--after-env takes NAME=VALUE" in bad.stderr


def test_bench_breakdown_names_every_process_of_a_windowed_send() -> None:
    """python -m bench.breakdown --window: the rate, then per operation the CPU, wake-ups and
    preemptions of the consumer, both daemons and (for Sends) the receiving consumer, what the
    daemon's intake did (every request of the run taken, by looks a doorbell or polling
    started), then the client's time inside a post and inside the dequeue of its completion,
    beside the machine's pace (a fixed loop's CPU time before and after)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.breakdown", "--op", "send", "--size", "64",
         "--iters", "300", "--window", "8"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("64 B send, window 8: ") and " op/s, median " in lines[0]
    names = [line.split(" per operation:")[0].strip() for line in lines[1:5]]
    assert names == ["consumer", "its daemon", "peer daemon", "peer consumer"]
    assert all("wake-ups" in line and "preempted" in line for line in lines[1:5])
    count = r"(\d{1,3}(?:,\d{3})*)"  # as printed: 1,642
    taken = re.fullmatch(
        rf"  its daemon's intake: 300 requests in {count} takes \(([\d.]+) each\), {count}"
        rf" doorbells, {count} busy polls \({count} empty looks\); the peer daemon's"
        rf" doorbells: {count}",
        lines[5],
    )
    assert taken, lines[5]
    takes, each = int(taken[1].replace(",", "")), float(taken[2])
    assert 0 < takes <= 300 and abs(each - 300 / takes) <= 0.05
    assert lines[6].startswith("  the client's CPU per operation: post ") and " reap " in lines[6]
    assert "this machine's pace: 1,000,000 additions in " in lines[6]
    assert lines[7].startswith("  consumer-daemon call round trip: ")


def test_bench_breakdown_placement_says_where_each_process_ran() -> None:
    """python -m bench.breakdown --placement: after the CPU lines, each process's samples that
    found it runnable, by the CPU it was on, as shares that add up to about 100 %."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.breakdown", "--iters", "3000", "--window", "8",
         "--placement"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    [line] = [x for x in out.stdout.splitlines() if x.startswith("  where each ran ")]
    parts = dict(part.split(" CPU ", 1) for part in line.split(": ", 1)[1].split("; "))
    assert set(parts) == {"consumer", "its daemon", "peer daemon"}, line
    cpus = range(os.cpu_count() or 1)
    for shares in parts.values():
        pairs = [re.fullmatch(r"(?:CPU )?(\d+) (\d+)%", s) for s in shares.split(", ")]
        assert all(m and int(m[1]) in cpus for m in pairs), line
        assert 97 <= sum(int(m[2]) for m in pairs if m) <= 103, line


def test_bench_breakdown_perf_splits_each_processs_cpu_by_code() -> None:
    """python -m bench.breakdown --perf: after the CPU lines, each process's CPU per operation
    split by the code perf sampled it in (parts that add up to it: perf_split); both daemons
    spent some of it in the interpreter and some in the kernel."""
    split = dict(perf_split("--iters", "2000", "--window", "8", timeout=120))
    assert set(split) == {"consumer", "its daemon", "peer daemon"}, split
    for name in ("its daemon", "peer daemon"):
        assert split[name]["interpreter"] > 0 and split[name]["kernel"] > 0, split


def test_bench_breakdown_perf_that_fails_ends_the_run_with_its_words(tmp_path: Path) -> None:
    """python -m bench.breakdown --perf where perf cannot record (a stand-in on PATH that says
    why and exits 1): exit 2 with perf's words, and no figures."""
    fake = tmp_path / "perf"
    fake.write_text("#!/bin/sh\necho 'perf_event_paranoid forbids it' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        [sys.executable, "-m", "bench.breakdown", "--perf", "--iters", "100"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip() == (
        "perf record did not start (exit 1: perf_event_paranoid forbids it)"
    )
    assert out.stdout == ""


def test_timeline_of_a_stretch_before_the_first_request_says_so() -> None:
    """A stretch that ends before anything passed a trace point (the benchmark still setting
    up): an error that says to start later, not an empty timeline."""
    stretch = ["--iters", "2000", "--at", "0", "--span", "0.05"]  # its first 50 us
    out = subprocess.run(
        [sys.executable, "-m", "bench.timeline", *stretch],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "raise --at" in out.stderr and out.stdout == ""


def test_timeline_shows_every_process_of_a_window() -> None:
    """``python -m bench.timeline``: the consumer's waits, the initiator's batches and ACKs and
    the target's landings, in one timeline."""
    # a second in: the set-up before the first WQE took 0.4 s on a slow VM under load
    stretch = ["--iters", "400000", "--at", "1.0", "--span", "20", "--rows", "100000"]
    out = subprocess.run(
        [sys.executable, "-m", "bench.timeline", *stretch],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    head, body = out.stdout.splitlines()[:4], out.stdout.splitlines()[4:]
    mine = ",".join(map(str, sorted(os.sched_getaffinity(0))))  # unpinned: as this process
    assert head[2] == f"# daemons on CPUs: the initiator's {mine}, the target's {mine}"
    events = [line.split(maxsplit=2)[1:] for line in body]
    seen = {(who, what.split()[0]) for who, what in events}
    assert {("C", "waits"), ("C", "has"), ("I", "took"), ("I", "sends"), ("I", "ACK")} <= seen
    assert {("T", "WRITES"), ("T", "acknowledges")} <= seen
    times = [float(line.split()[0]) for line in body]
    assert times == sorted(times) and times[0] >= 0 and times[-1] <= 20_000


def test_functions_of_both_daemons_per_operation() -> None:
    """``python -m bench.functions``: per operation, the initiator's daemon reads an ACK and
    retires a Write, the target's reads the Write and answers it at once (lane.answer, then
    its ACK: the read all but never runs a turn or reaches Nic.peer_frame); ``--daemon-cpus`` pins
    the two daemons it starts (its header reads their affinity back)."""
    cpus = sorted(os.sched_getaffinity(0))
    first, last = cpus[0], cpus[-1]  # two CPUs apart where the machine has them
    stretch = ["--iters", "30000", "--at", "1.0", "--span", "300"]
    out = subprocess.run(
        [sys.executable, "-m", "bench.functions", *stretch, "--daemon-cpus", f"{first}:{last}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[2] == f"# daemons on CPUs: the initiator's {first}, the target's {last}"
    split = next(i for i, line in enumerate(lines) if line.startswith("the target's daemon"))
    rows = [{line.split()[0]: float(line.split()[1]) for line in part[1:]}
            for part in (lines[3:split], lines[split:])]  # fmt: skip
    initiator, target = rows
    assert lines[3].startswith("the initiator's daemon")
    assert 0.8 <= initiator["Initiator.ack"] <= 1.2 and 0.8 <= target["lane.answer"] <= 1.5
    assert 0.8 <= target["Target.batch_end"] <= 1.5
    assert target.get("Turn.end", 0.0) < 0.2 and target.get("Nic.peer_frame", 0.0) < 0.2
    assert "Initiator.ack" not in target and "PeerStream.buffer_updated" in target


def test_syscalls_times_every_stage_of_a_round_trip() -> None:
    """``python -m bench.syscalls``: perf traces both daemons; every stage of a window-1
    Write's round trip is timed, over complete round trips."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.syscalls", "--seconds", "0.3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode == 2:
        pytest.skip(f"this machine cannot trace system calls: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    head, *rows = out.stdout.splitlines()
    complete = re.search(r"([\d,]+) complete round trips of ([\d,]+) traced", head)
    assert complete is not None and int(complete[1].replace(",", "")) > 0
    numbered = [row for row in rows if row[-1:].isdigit()]  # the rows that end in figures
    timed = {row[:81].strip(): float(row.split()[-2]) for row in numbered}
    names = [f"{start:<40} {end}".strip() for start, end in STAGES]
    assert all(timed[name] > 0 for name in [*names, "the round trip, traced"]), timed
