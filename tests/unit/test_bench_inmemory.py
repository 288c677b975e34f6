"""bench.inmemory: the NIC core's cost per operation in memory, for each operation and target
memory, printed as one line."""

from __future__ import annotations

import math

import pytest

from bench import inmemory


@pytest.mark.parametrize("op", ["write", "send"])
@pytest.mark.parametrize("process", [False, True], ids=["shm", "process"])
def test_every_figure_is_a_positive_time(op: str, process: bool) -> None:
    figures = inmemory.measure(op, 64, process, bursts=8)
    assert all(math.isfinite(us) and us > 0 for us in figures), figures


def test_main_prints_the_three_figures(capsys: pytest.CaptureFixture[str]) -> None:
    inmemory.main(["--op", "send", "--target", "process", "--bursts", "8"])
    line = capsys.readouterr().out.strip()
    assert line.startswith("64 B send, 64 per burst, target memory process: post "), line
    assert "both daemons' cores" in line and line.endswith("(best of 8 chunks)"), line


def test_burst_sets_how_many_are_posted_at_a_time(capsys: pytest.CaptureFixture[str]) -> None:
    """--burst posts that many at a time (each burst must complete them all); out of range is
    refused."""
    inmemory.main(["--burst", "2", "--bursts", "8"])
    assert capsys.readouterr().out.startswith("64 B write, 2 per burst, target memory shm: ")
    with pytest.raises(SystemExit):
        inmemory.main(["--burst", str(inmemory.MAX_BURST + 1)])
