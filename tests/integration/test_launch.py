"""fabricd.launch.start_node: a daemon that exits while it starts is reported with its words."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricd.launch import start_node


def test_a_daemon_that_exits_at_startup_is_reported_with_the_end_of_its_log(
    tmp_path: Path,
) -> None:
    log = tmp_path / "x.log"
    with pytest.raises(RuntimeError) as failed:
        start_node("x", str(tmp_path / "x.sock"), extra=["--sched", "fifo"], log_path=str(log))
    said = str(failed.value)
    assert said.startswith("fabricd x did not start (exit 2)")
    assert f"the end of its log {log}:" in said
    assert "invalid choice: 'fifo'" in said, said
