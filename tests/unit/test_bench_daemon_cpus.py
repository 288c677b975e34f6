"""fabricctl bench --daemon-cpus I:T as its output shows it: the header names where the
daemons run, the JSON carries the lists, and running nodes (--initiator), which this run does
not start, refuse it before anything is measured."""

from __future__ import annotations

import pytest

from bench import fabric
from bench.perftest import Result, header
from tools.ctl import build_parser


def _header(cpus: tuple[str, str], same_node: bool = False) -> list[str]:
    return header("write", "bw", 64, same_node, {}, cpus=cpus).splitlines()


def test_the_header_says_where_pinned_daemons_run() -> None:
    assert " Daemons         : initiator's CPUs 0, target's CPUs 1" in _header(("0", "1"))
    assert " Daemons         : initiator's unpinned, target's CPUs 2-3" in _header(("", "2-3"))
    assert " Daemons         : the one, CPUs 1" in _header(("1", ""), same_node=True)
    assert not any(line.startswith(" Daemons") for line in _header(("", "")))


def test_the_json_carries_the_daemons_cpu_lists() -> None:
    result = Result("write", "bw", 64, 10, 64, False)
    assert result.to_json({})["daemon_cpus"] == ["", ""]
    result.daemon_cpus = ("1", "0")
    assert result.to_json({})["daemon_cpus"] == ["1", "0"]


def test_running_nodes_refuse_daemon_cpus(capsys: pytest.CaptureFixture[str]) -> None:
    running = ["--initiator", "/no/a.sock", "--target", "/no/b.sock", "--target-address", "h:1"]
    args = build_parser().parse_args(["bench", *running, "--daemon-cpus", "1:0"])
    assert fabric.main(args) == 2
    assert "--daemon-cpus pins the daemons a run starts" in capsys.readouterr().err
