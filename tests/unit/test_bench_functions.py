"""bench.functions' parts: a clocked function counts only the calls begun while counting, and
leaves each call as it was (its result, its exception); every entry of FUNCTIONS still names a
function of the daemon; a table puts the most time first, per operation; the stretch file is
read once written whole."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from bench import functions
from bench.timeline import open_stretch, stretch_named
from tests.unit import test_bench_timeline as timeline_tests


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench.timeline's tests' stand-ins for the daemon's functions, put back afterwards."""
    monkeypatch.setattr(timeline_tests.Adder, "add", timeline_tests.Adder.add)
    monkeypatch.setattr(timeline_tests, "twice", timeline_tests.twice)
    return timeline_tests


def test_a_clocked_function_counts_the_calls_begun_while_counting(stand_ins: ModuleType) -> None:
    sums: functions.Sums = {}
    on = [False]
    home = stand_ins.__name__
    functions.install(((home, "Adder", "add"), (home, "", "twice")), sums, lambda: on[0])
    assert stand_ins.Adder().add(1) == 1 and stand_ins.twice(2) == 4
    assert sums == {"Adder.add": [0, 0], "test_bench_timeline.twice": [0, 0]}
    on[0] = True
    assert stand_ins.Adder().add(2, b=3) == 5
    with pytest.raises(TypeError):
        stand_ins.Adder().add("2", 3)
    assert stand_ins.twice(3) == 6
    calls, ns = sums["Adder.add"]
    assert calls == 2 and ns > 0
    assert sums["test_bench_timeline.twice"][0] == 1


@pytest.mark.parametrize("entry", functions.FUNCTIONS, ids=lambda e: f"{e[1]}.{e[2]}")
def test_every_function_names_one_of_the_daemon(entry: tuple[str, str, str]) -> None:
    module, owner, name = entry
    home = importlib.import_module(module)
    assert callable(getattr(getattr(home, owner) if owner else home, name))


def test_a_table_puts_the_most_time_first_per_operation() -> None:
    sums = {"A.small": [10, 20_000], "B.big": [5, 90_000], "C.idle": [0, 0]}
    assert functions.table("daemon", sums, 10.0) == [
        f"{'daemon':<34} {'calls/op':>9} {'us/op':>8}",
        f"  {'B.big':<32} {0.5:9.2f} {9.0:8.1f}",
        f"  {'A.small':<32} {1.0:9.2f} {2.0:8.1f}",
    ]


def test_the_stretch_is_read_once_written(tmp_path: Path) -> None:
    assert stretch_named(str(tmp_path / "stretch")) is None
    start, end = open_stretch(str(tmp_path), 1.0, 250.0)
    assert stretch_named(str(tmp_path / "stretch")) == (start, end)
    assert end - start == 250_000_000
