"""The performance table of the README: every goal row, medians of several runs, each against
limits measured in the same run (``python -m bench.report [--runs 3] [--markdown]``)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.limits import measure
from bench.ucx import RunError, run_ucx

MiB = 1 << 20


def bench(
    *args: str, tree: Path | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """One ``fabricctl bench --json`` row (``tree``: run by another checkout's own code, and
    its ``client.ctl`` if it predates the tools package; python -m puts it first on sys.path;
    ``env``: variables set for it and the daemons it starts)."""
    module = "tools.ctl"
    if tree is not None and not (tree / "tools" / "ctl.py").exists():
        module = "client.ctl"
    out = subprocess.run(
        [sys.executable, "-m", module, "bench", "--json", "--no-limits", *args],
        cwd=tree,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode:
        raise RunError(f"fabricctl bench {' '.join(args)}: {out.stderr.strip()[-300:]}")
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


@dataclass
class Goal:
    """One row of the issue's table: what is run, what it is compared with, the goal."""

    name: str
    args: tuple[str, ...]
    key: str  # the figure taken from the bench row
    limit: str  # the limit it is divided by ("" when the goal is absolute)
    goal: float  # the ratio (or absolute value) to reach
    higher_is_better: bool = True
    unit: str = "MB/s"


GOALS = [
    Goal(
        "RDMA Write, 1 MiB, window 16",
        ("--op", "write", "--size", str(MiB), "--iters", "400"),
        "bw_MBps",
        "tcp",
        0.75,
    ),
    Goal(
        "RDMA Read, 1 MiB, window 16",
        ("--op", "read", "--size", str(MiB), "--iters", "400"),
        "bw_MBps",
        "tcp",
        0.75,
    ),
    Goal(
        "Send, 1 MiB, window 16",
        ("--op", "send", "--size", str(MiB), "--iters", "400"),
        "bw_MBps",
        "tcp",
        0.75,
    ),
    Goal(
        "RDMA Write, 64 B, window 64",
        ("--op", "write", "--size", "64", "--iters", "5000", "--window", "64"),
        "msg_rate",
        "pipelined",
        0.4,
        unit="Mops/s",
    ),
    Goal(
        "RDMA Write, 64 B, window 1 (median)",
        ("--op", "write", "--mode", "lat", "--size", "64", "--iters", "2000"),
        "lat_us_p50",
        "rtt",
        3.0,
        higher_is_better=False,
        unit="us",
    ),
    Goal(
        "RDMA Read, 64 B, window 1 (median)",
        ("--op", "read", "--mode", "lat", "--size", "64", "--iters", "2000"),
        "lat_us_p50",
        "rtt",
        3.0,
        higher_is_better=False,
        unit="us",
    ),
    Goal(
        "RDMA Write, 1 MiB, same node",
        ("--op", "write", "--size", str(MiB), "--iters", "400", "--same-node"),
        "bw_MBps",
        "tcp",
        3.0,
    ),
    Goal(
        "connection setup between two daemons",
        ("--op", "connect", "--iters", "1000"),
        "conn_per_s",
        "",
        1000.0,
        unit="conn/s",
    ),
    Goal(
        "1,000 connected EP pairs: daemon memory growth",
        ("--op", "scale", "--iters", "1000"),
        "rss_growth_MB",
        "",
        50.0,
        higher_is_better=False,
        unit="MB",
    ),
]


def figure(row: dict[str, Any], key: str) -> float:
    """The figure of a bench row (for memory growth: the larger of the two daemons)."""
    value = row[key]
    return float(max(value)) if isinstance(value, list) else float(value)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    p = argparse.ArgumentParser(prog="python -m bench.report")
    p.add_argument("--runs", type=int, default=3, help="runs per row (the median is shown)")
    p.add_argument("--markdown", action="store_true", help="a markdown table")
    args = p.parse_args(argv)
    limits = [measure(1.0) for _ in range(args.runs)]
    tcp = statistics.median(lim.tcp_stream_MBps for lim in limits)
    rtt = statistics.median(lim.rr_rtt_us for lim in limits)
    pipelined = statistics.median(lim.rr_pipelined_per_s for lim in limits)
    ucx: dict[str, float | None] = {}
    for test in ("ucp_put_bw", "ucp_get"):
        try:
            ucx[test] = statistics.median(
                run_ucx(test, MiB, 200, 60).bw_MBps for _ in range(args.runs)
            )
        except (RunError, OSError) as err:
            print(f"ucx_perftest {test}: {err}", file=sys.stderr)
            ucx[test] = None
    bases = {"tcp": tcp, "rtt": rtt, "pipelined": pipelined / 1e6, "": 1.0}
    when = datetime.date.today().isoformat()
    print(
        f"# measured {when} on {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}; medians of "
        f"{args.runs} runs"
    )
    print(
        f"# limits: TCP stream {tcp:.0f} MB/s, uvloop 64 B request-reply RTT {rtt:.1f} us, "
        f"pipelined {pipelined / 1e3:.0f} k/s; ucx_perftest (tcp) put_bw "
        f"{ucx['ucp_put_bw'] or 0:.0f} MB/s, get {ucx['ucp_get'] or 0:.0f} MB/s (1 MiB)"
    )
    header = ["operation", "measured", "vs limit", "goal", "met"]
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
    for goal in GOALS:
        rows = [bench(*goal.args) for _ in range(args.runs)]
        value = statistics.median(figure(r, goal.key) for r in rows)
        ratio = value / bases[goal.limit]
        met = ratio >= goal.goal if goal.higher_is_better else ratio <= goal.goal
        versus = f"{ratio:.2f} x {goal.limit}" if goal.limit else "-"
        sign = ">=" if goal.higher_is_better else "<="
        target = f"{sign} {goal.goal:g} x {goal.limit}" if goal.limit else f"{sign} {goal.goal:g}"
        extra = ""
        if goal.name.startswith("RDMA Write, 1 MiB, window") and ucx["ucp_put_bw"]:
            extra = f"; {value / ucx['ucp_put_bw']:.2f} x ucx put_bw (goal >= 1)"
        if goal.name.startswith("RDMA Read, 1 MiB") and ucx["ucp_get"]:
            extra = f"; {value / ucx['ucp_get']:.2f} x ucx get (goal >= 2)"
        if goal.key == "rss_growth_MB":
            done = min(int(r["writes_completed"]) for r in rows)
            extra = f"; 64 B writes completed {done}/1000"
        cells = [
            goal.name,
            f"{value:.4g} {goal.unit}",
            versus + extra,
            target,
            "yes" if met else "no",
        ]
        if args.markdown:
            print("| " + " | ".join(cells) + " |", flush=True)
        else:
            print("  ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
