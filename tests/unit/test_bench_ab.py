"""bench.ab's table: each side's median and range per row, their ratio, and columns that stay
apart whatever the length of a row's arguments or of its figures."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from bench import ab


def test_rows_of_any_length_keep_their_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    figures: Iterator[float] = itertools.cycle([100.0, 150.0, 110.0, 160.0, 90.0, 140.0])

    def figure(tree: Path, args: str, env: Mapping[str, str]) -> float:
        return next(figures)

    monkeypatch.setattr(ab, "figure", figure)
    rows = ["--op write --size 64", "--op write --size 4096 --window 64 --iters 200000 --cq-mod 16"]
    empty: dict[str, str] = {}
    sides = ((Path("before"), empty), (Path("after"), empty))
    head, *lines = ab.compare(sides, rows, rounds=3)
    assert len({len(line) for line in [head, *lines]}) == 1, "one width for every line"
    for args, line in zip(rows, lines, strict=True):
        assert line.startswith(args + " ")
        assert line.split()[-5:] == ["100", "(90-110)", "150", "(140-160)", "1.50"]


def test_wide_figures_keep_their_cells_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    # round by round, before then after
    figures = iter([169077.0, 158699.0, 147143.0, 150744.0, 119451.0, 124992.0])

    def figure(tree: Path, args: str, env: Mapping[str, str]) -> float:
        return next(figures)

    monkeypatch.setattr(ab, "figure", figure)
    empty: dict[str, str] = {}
    sides = ((Path("before"), empty), (Path("after"), empty))
    head, line = ab.compare(sides, ["--op write --size 4096"], rounds=3)
    assert len(head) == len(line)
    assert line.split()[-5:] == ["147143", "(119451-169077)", "150744", "(124992-158699)", "1.02"]
