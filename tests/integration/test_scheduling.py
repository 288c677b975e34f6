"""fabricd's scheduling policy (fabricd.runtime.scheduling): SCHED_BATCH unless told otherwise,
so a woken daemon does not preempt the consumer that rang its doorbell; and its CPUs
(fabricd.runtime.pin: --cpus, DATFABRIC_CPUS, fabricctl bench --daemon-cpus)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.nodes import local_fabric
from tests.conftest import StartNode

OURS = sorted(os.sched_getaffinity(0))  # the CPUs this test may use


def _policies(pid: int) -> set[int]:
    """The policy of every thread of ``pid`` (uvloop's threads included)."""
    return {os.sched_getscheduler(int(t)) for t in os.listdir(f"/proc/{pid}/task")}


def test_a_daemon_runs_every_thread_as_a_batch_task_by_default(start: StartNode) -> None:
    node = start("batch")
    assert _policies(node.proc.pid) == {os.SCHED_BATCH}
    assert "scheduling refused" not in node.log_text()


def test_sched_normal_keeps_the_default_policy(start: StartNode) -> None:
    node = start("normal", extra=["--sched", "normal"])
    assert _policies(node.proc.pid) == {os.SCHED_OTHER}


def _refused(name: str, value: str) -> str:
    """What fabricd says on stderr when ``name=value`` in its environment stops it from starting
    (it exits 2, as argparse does)."""
    done = subprocess.run(
        [sys.executable, "-m", "fabricd.cli", "--no-cluster-key", "--listen", "127.0.0.1:0"],
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    return done.stderr


def test_an_unknown_policy_from_the_environment_is_refused_before_the_daemon_starts() -> None:
    assert "DATFABRIC_SCHED=fifo: use one of batch, normal" in _refused("DATFABRIC_SCHED", "fifo")


def _affinities(pid: int) -> set[frozenset[int]]:
    """The CPUs every thread of ``pid`` may run on."""
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


def test_cpus_pin_every_thread_of_the_daemon(start: StartNode) -> None:
    node = start("pinned", extra=["--cpus", str(OURS[-1])])
    assert _affinities(node.proc.pid) == {frozenset({OURS[-1]})}
    assert "refused" not in node.log_text()


def test_datfabric_cpus_pins_the_daemons_fabricctl_starts(
    start: StartNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATFABRIC_CPUS", str(OURS[0]))
    node = start("from-env")
    assert _affinities(node.proc.pid) == {frozenset({OURS[0]})}


def test_a_cpu_the_machine_does_not_offer_leaves_the_daemon_where_it_was(start: StartNode) -> None:
    node = start("nowhere", extra=["--cpus", "4095"])
    assert _affinities(node.proc.pid) == {frozenset(OURS)}
    assert "CPUs [4095] refused: Invalid argument: the daemon runs as it was started" in (
        node.log_text()
    )


def test_a_cpu_list_that_is_not_one_is_refused_before_the_daemon_starts() -> None:
    assert "--cpus (or DATFABRIC_CPUS): '1-' is not a CPU list" in _refused("DATFABRIC_CPUS", "1-")


def test_a_benchmarks_fabric_pins_the_initiators_and_the_targets_daemon_apart() -> None:
    with local_fabric(False, (str(OURS[-1]), str(OURS[0]))) as fabric:
        assert fabric.daemons is not None
        initiator, target = fabric.daemons
        assert _affinities(initiator) == {frozenset({OURS[-1]})}
        assert _affinities(target) == {frozenset({OURS[0]})}
    with local_fabric(True, (str(OURS[0]), "")) as fabric:
        assert fabric.daemons is not None and fabric.daemons[0] == fabric.daemons[1]
        assert _affinities(fabric.daemons[0]) == {frozenset({OURS[0]})}
