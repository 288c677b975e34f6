"""The C provider against the Python client, same machine, same run: Debian's dapltest -T P
over libdatfabric beside ``fabricctl bench`` for the same operations.

    python -m bench.dapl [--repeat N]   (after make provider; needs dapltest from dapl2-utils)

Rows: RDMA Write of 4 B with one operation in flight (latency) and of 64 KiB with 16 in
flight (bandwidth), dapltest blocking (-m b) and polling (-m p) beside the Python client
waiting (dat_evd_wait) and polling (``fabricctl bench --poll``: dequeue in a loop). The ratio
is C over Python in operations per second, each the median of ``--repeat`` interleaved runs: at
least 1.0 is the goal.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from bench.report import bench
from bench.ucx import RunError
from fabricd.launch import Node, free_port, start_node
from tools.datconf import LIBRARY, lines


@dataclass(frozen=True)
class Case:
    """One row: dapltest's arguments and the fabricctl bench run of the same operation."""

    name: str
    size: int
    pipeline: int
    iters: int
    bench_args: tuple[str, ...]


CASES = (
    Case("RW 4 B, pipeline 1", 4, 1, 3000, ("--mode", "lat", "--size", "4")),
    Case("RW 64 KiB, pipeline 16", 65536, 16, 20000, ("--mode", "bw", "--size", "65536")),
)


def dapltest_ops(env: dict[str, str], mode: str, case: Case) -> float:
    """Operations per second dapltest -T P reports."""
    args = ["-T", "P", "-s", "127.0.0.1", "-D", "df", "-i", str(case.iters)]
    args += ["-p", str(case.pipeline), "-m", mode, "RW", str(case.size), "1"]
    done = subprocess.run(["dapltest", *args], env=env, capture_output=True, text=True, timeout=300)
    found = re.search(r"Operation Throughput\s*:\s*([\d.]+)", done.stdout)
    if done.returncode or not found:
        raise RunError(f"dapltest {' '.join(args)}: {done.stdout[-300:]}{done.stderr[-300:]}")
    return float(found.group(1))


def python_ops(case: Case, mode: str) -> float:
    """Operations per second of fabricctl bench (RDMA Write, same size and window, waiting
    for completions as dapltest's ``mode`` does: b blocks, p polls)."""
    window = ("--window", str(case.pipeline)) if case.pipeline > 1 else ()
    poll = ("--poll",) if mode == "p" else ()
    row = bench("--op", "write", "--iters", str(case.iters), *case.bench_args, *window, *poll)
    if case.pipeline == 1:
        return 1e6 / float(row["lat_us_p50"])
    return float(row["msg_rate"]) * 1e6


def environment(tmp: str, node: Node, tag: str) -> dict[str, str]:
    """A C program's environment naming IA ``df`` on ``node``."""
    path = os.path.join(tmp, f"{tag}.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(lines("df", node.socket, LIBRARY))
    return {**os.environ, "DAT_OVERRIDE": path}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dapl")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row (the median is shown)")
    repeat = parser.parse_args(argv).repeat
    if shutil.which("dapltest") is None or not LIBRARY.exists():
        print("needs dapltest (dapl2-utils) and the provider (make provider)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="datfabric-dapl-") as tmp:
        port = free_port("127.0.0.1", "127.0.0.2")
        nodes = [
            start_node("dapl-a", os.path.join(tmp, "a.sock"), "127.0.0.1", port),
            start_node("dapl-b", os.path.join(tmp, "b.sock"), "127.0.0.2", port),
        ]
        server = subprocess.Popen(
            ["dapltest", "-T", "S", "-D", "df"],
            env=environment(tmp, nodes[0], "a"),
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            client = environment(tmp, nodes[1], "b")
            for case in CASES:
                for mode in ("b", "p"):
                    c_runs, py_runs = [], []
                    for _ in range(repeat):  # interleaved: a busy spell hits both sides
                        py_runs.append(python_ops(case, mode))
                        c_runs.append(dapltest_ops(client, mode, case))
                    c_ops, py_ops = statistics.median(c_runs), statistics.median(py_runs)
                    rows.append((case.name, mode, c_ops, py_ops))
            subprocess.run(["dapltest", "-T", "Q", "-s", "127.0.0.1", "-D", "df"], env=client,
                           capture_output=True, timeout=60, check=False)  # fmt: skip
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
            for node in nodes:
                node.stop()
    print(f"{'operation':<26}{'mode':<15}{'C ops/s':>12}{'Python ops/s':>15}{'C/Python':>10}")
    for name, mode, c_ops, py_ops in rows:
        label = "blocking" if mode == "b" else "polling"
        print(f"{name:<26}{label:<15}{c_ops:>12.0f}{py_ops:>15.0f}{c_ops / py_ops:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
