"""The daemon's shell: busy polling's next look gives the CPU away first (a consumer that
shares it can post), then runs in a later loop iteration, not in this one."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from fabricd.server import Daemon


def test_the_next_look_yields_the_cpu_then_runs_in_a_later_iteration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    monkeypatch.setattr(os, "sched_yield", lambda: said.append("yield"))
    daemon = Daemon("shell", "127.0.0.1", 0, str(tmp_path / "d.sock"))

    async def main() -> None:
        daemon._loop = asyncio.get_running_loop()
        daemon.call_next(lambda: said.append("look"))
        said.append("this iteration")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(main())
    assert said == ["yield", "this iteration", "look"]
