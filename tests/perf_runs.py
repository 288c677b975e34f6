"""``python -m bench.breakdown --perf`` in a test: its split lines read back, each checked
(known parts that add up to the process's CPU); skipped with perf's own reason where perf
cannot run here (a usage error still fails)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.perfsplit import PARTS

CANNOT = ("--perf needs perf", "perf record")  # the tool's own reasons, not argparse's


def read(text: str) -> tuple[str, float, dict[str, float]] | None:
    """A bench.perfsplit ``line`` read back: the process's name, its CPU and its parts in us
    (None for any other text)."""
    head, sep, cells = text.partition(" us: ")
    name, of, cpu = head.rpartition(" of its ")
    if not (sep and of):
        return None
    parts = {key: float(us) for key, us in (cell.rsplit(" ", 1) for cell in cells.split(", "))}
    return name.strip(), float(cpu), parts


def perf_split(*args: str, timeout: float) -> list[tuple[str, dict[str, float]]]:
    """Each split line of a ``bench.breakdown --perf ARGS`` run: (process, parts in us)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.breakdown", "--perf", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if out.returncode == 2 and any(reason in out.stderr for reason in CANNOT):
        pytest.skip(f"this machine cannot run perf: {out.stderr.strip()}")
    assert out.returncode == 0 and not out.stderr, out.stdout + out.stderr
    rows = [(text, found) for text in out.stdout.splitlines() if (found := read(text))]
    for text, (_, cpu, parts) in rows:
        assert set(parts) <= set(PARTS), text
        assert abs(sum(parts.values()) - cpu) <= 0.06 * len(PARTS), text  # each rounded, or < 0.05
    return [(name, parts) for _, (name, _, parts) in rows]
