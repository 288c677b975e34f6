"""fabricd's scheduling policy (fabricd.runtime.scheduling): SCHED_BATCH unless told otherwise,
so a woken daemon does not preempt the consumer that rang its doorbell."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import StartNode


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


def test_an_unknown_policy_from_the_environment_is_refused_before_the_daemon_starts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fabricd.cli", "--no-cluster-key", "--listen", "127.0.0.1:0"],
        env={**os.environ, "DATFABRIC_SCHED": "fifo"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "DATFABRIC_SCHED=fifo: use one of batch, normal" in done.stderr
