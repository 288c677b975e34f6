"""bench.functions' parts: a clocked function counts only the calls begun while counting, and
leaves each call as it was (its result, its exception); every entry of FUNCTIONS still names a
function of the daemon; a table puts the most time first, per operation; the stretch file is
read once written whole."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import functions
from bench.timeline import open_stretch, stretch_named


class Adder:
    """A stand-in for a class of the daemon."""

    def add(self, a: int, b: int = 0) -> int:
        if a < 0:
            raise ValueError("negative")
        return a + b


def twice(n: int) -> int:
    return 2 * n


@pytest.fixture
def restored() -> Iterator[None]:
    add, doubled = Adder.add, twice
    yield
    Adder.add = add  # type: ignore[method-assign]
    globals()["twice"] = doubled


@pytest.mark.usefixtures("restored")
def test_a_clocked_function_counts_the_calls_begun_while_counting() -> None:
    sums: functions.Sums = {}
    on = [False]
    functions.install(((__name__, "Adder", "add"), (__name__, "", "twice")), sums, lambda: on[0])
    assert Adder().add(1) == 1 and twice(2) == 4
    assert sums == {"Adder.add": [0, 0], f"{__name__.rpartition('.')[2]}.twice": [0, 0]}
    on[0] = True
    assert Adder().add(2, b=3) == 5
    with pytest.raises(ValueError, match="negative"):
        Adder().add(-1)
    assert twice(3) == 6
    calls, ns = sums["Adder.add"]
    assert calls == 2 and ns > 0
    assert sums[f"{__name__.rpartition('.')[2]}.twice"][0] == 1


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
