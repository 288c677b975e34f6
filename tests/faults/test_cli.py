"""fabricctl fault / partition / heal / node, and the demo under a fault schedule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fabricd.launch import Node
from proto.constants import EventNumber
from tests.conftest import StartNode
from tests.integration.flows import connect_pair, wait_event

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "faults"


def ctl(nodes: list[Node], *args: str) -> str:
    spec = ",".join(f"{n.name}={n.socket}" for n in nodes)
    out = subprocess.run(
        [sys.executable, "-m", "tools.ctl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DATFABRIC_NODES": spec},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("datfabric-")}


def test_rules_from_the_command_line(start: StartNode, tmp_path: Path) -> None:
    a, b = start("n1"), start("n2")
    nodes = [a, b]
    assert (
        ctl(
            nodes,
            "fault",
            "add",
            "--name",
            "w",
            "--action",
            "drop",
            "--op",
            "RDMA_WRITE",
            "--src",
            "n1",
            "--probability",
            "0.5",
            "--seed",
            "3",
        ).strip()
        == "added w"
    )
    listed = ctl(nodes, "fault", "list")
    assert listed.startswith("n1: ") and json.loads(listed[4:])["name"] == "w"
    pair = connect_pair(a.socket, b.socket, b.address)
    try:
        for i in range(20):
            pair.ep_a.post_rdma_write([pair.lmr_a.triplet(0, 8)], i, pair.lmr_b.remote(0, 8))
            assert wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT).status == 0
    finally:
        pair.close()
    log = ctl(nodes, "fault", "log").splitlines()
    assert log and all(json.loads(line)["rule"] == "w" for line in log)
    (tmp_path / "faults.log").write_text("\n".join(log) + "\n")
    assert ctl(nodes, "fault", "replay", str(tmp_path / "faults.log")).strip() == (
        f"installed {len(log)} replay rules"
    )
    assert ctl(nodes, "fault", "clear").strip() == "cleared: 0 rules left"
    assert ctl(nodes, "fault", "list") == ""
    assert ctl(nodes, "partition", "n1/n2").startswith("partitioned n1 | n2")
    assert len(ctl(nodes, "fault", "list").splitlines()) == 2
    assert ctl(nodes, "heal").strip() == "healed: 0 rules left"
    status = json.loads(ctl(nodes, "node", "status", "n2"))
    assert status["name"] == "n2" and status["pid"] == b.proc.pid
    before = _segments()
    ctl(nodes, "node", "crash", "n2")
    assert b.proc.wait(10) != 0
    assert _segments() <= before, "the IA that asked for the crash left its queues behind"


def test_the_demo_survives_a_flaky_schedule() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.ctl",
            "demo",
            "--iters",
            "50",
            "--faults",
            str(EXAMPLES / "flaky.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "demo passed" in out.stdout


def test_the_demo_reports_which_operation_a_partition_failed() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.ctl",
            "demo",
            "--iters",
            "40000",  # far more than fit in the schedule's first 0.3 s after the connect
            "--size",
            "65536",
            "--faults",
            str(EXAMPLES / "partition.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    faults = [
        json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("fault: ")
    ]
    assert faults and faults[0]["action"] == "reset"
    assert "demo failed (client)" in out.stderr and "(cookie " in out.stderr
    assert "DTO_ERR_" in out.stderr
