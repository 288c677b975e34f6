"""Warm-up before a measurement: fabricctl bench's default and ``--warmup``, bench.compare
giving every tool the same count, and bench.ab warming both revisions alike."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import cast

import pytest

from bench import ab, compare, fabric, ucx
from bench.perftest import WARMUP, at_least_zero, warmup


def test_a_run_warms_up_as_long_as_it_measures_up_to_ucx_perftests_default() -> None:
    assert WARMUP == 10_000  # ucx_perftest -w's default
    assert [warmup(n) for n in (1, 203, 10_000, 20_000)] == [1, 203, 10_000, 10_000]
    assert warmup(20_000, 0) == 0 and warmup(5, 50) == 50  # asked: as asked


class _Session:
    """bench.fabric.Session's run, recording how many operations each run was asked for."""

    def __init__(self) -> None:
        self.runs: list[int] = []

    def run(
        self, op: str, size: int, iters: int, *_: object
    ) -> tuple[float, list[float], list[float]]:
        self.runs.append(iters)
        return 1.0, [10.0] * iters, [float(i) for i in range(iters)]


@pytest.mark.parametrize(("asked", "untimed"), [(None, 300), (7, 7), (0, 0)])
def test_a_size_runs_its_warm_up_untimed_before_the_timed_run(
    asked: int | None, untimed: int
) -> None:
    session = _Session()
    result = fabric.measure(
        cast(fabric.Session, session), "write", "bw", 64, 300, 16, False, lambda _: None,
        warm=asked,
    )  # fmt: skip
    assert session.runs == [n for n in (untimed, 300) if n]  # the warm-up first, if any
    assert result.warmup == untimed
    assert result.bw_MBps == pytest.approx(64 * 300 / 1.0 / 1e6)  # from the timed run alone


@pytest.mark.parametrize("text", ["-1", "x", "1.5"])
def test_a_warm_up_is_a_whole_number_of_zero_or_more(text: str) -> None:
    assert at_least_zero("0") == 0
    with pytest.raises(argparse.ArgumentTypeError):
        at_least_zero(text)


def test_compare_tells_fabricctl_bench_the_warm_up_ucx_perftest_gets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []

    def run_group(argv: list[str], timeout: float, what: str) -> tuple[int, str, str]:
        seen.append(argv)
        return 0, json.dumps({"size": 64, "bw_MBps": 1.0}), ""

    monkeypatch.setattr(compare, "_run_group", run_group)
    ours = compare.Ours(window=64, cq_mod=16, warm=warmup(20_000))
    ours.run("write", "bw", 64, 20_000, timeout=5)
    argv = seen[0]
    assert argv[argv.index("--warmup") + 1] == "10000"


def test_compare_tells_fabricctl_bench_the_daemons_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def run_group(argv: list[str], timeout: float, what: str) -> tuple[int, str, str]:
        seen.append(argv)
        return 0, json.dumps({"size": 64, "bw_MBps": 1.0}), ""

    monkeypatch.setattr(compare, "_run_group", run_group)
    args = compare.build_parser().parse_args(["--daemon-cpus", "1:0"])
    for cpus in (args.daemon_cpus, ("", "")):
        compare.Ours(cpus=cpus).run("write", "bw", 64, 1000, timeout=5)
    assert seen[0][seen[0].index("--daemon-cpus") + 1] == "1:0"
    assert "--daemon-cpus" not in seen[1], "unpinned unless asked"


def test_compare_passes_ucx_perftest_its_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_ucx gives ucx_perftest's client ``-w`` when told a warm-up, nothing otherwise."""
    clients: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        clients.append(argv)
        raise subprocess.TimeoutExpired(argv, 0)  # enough: the argv is what this test wants

    monkeypatch.setattr(subprocess, "run", run)
    for warm in (123, None):
        with pytest.raises(ucx.RunError):
            ucx.run_ucx("ucp_put_bw", 64, 1000, timeout=20, warm=warm)
    assert clients[0][clients[0].index("-w") + 1] == "123"
    assert "-w" not in clients[1]


def _tree(root: Path, name: str, ctl: str | None) -> Path:
    tree = root / name
    (tree / "tools").mkdir(parents=True)
    if ctl is not None:
        (tree / "tools" / "ctl.py").write_text(ctl)
    return tree


def test_ab_warms_both_sides_alike(tmp_path: Path) -> None:
    new = _tree(tmp_path, "new", 'bench.add_argument(\n    "--warmup",\n')
    old = _tree(tmp_path, "old", 'bench.add_argument("--cq-mod")\n')
    older = _tree(tmp_path, "older", None)  # client.ctl's time
    row = "--op write --size 4096"
    assert ab.warm_alike([new, new], row) == [row, row]
    assert ab.warm_alike([old, new], row) == [row, f"{row} --warmup 50"]
    assert ab.warm_alike([new, older], row) == [f"{row} --warmup 50", row]
    told = f"{row} --warmup 9"
    assert ab.warm_alike([old, new], told) == [told, told]  # as given: the old side says no
