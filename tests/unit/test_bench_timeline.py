"""bench.timeline's parts: the recorder keeps its stretch only, a trace point records what its
call says without changing the call, every point still names a function of the daemon, and
traces merge in time order."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import timeline
from bench.timeline import Point, Recorder


class Adder:
    """A stand-in for a class of the daemon."""

    def add(self, a: int, b: int = 0) -> int:
        return a + b


def twice(n: int) -> int:
    return 2 * n


def test_the_recorder_keeps_its_stretch_and_saves_once(tmp_path: Path) -> None:
    ticks: Iterator[int] = iter([5, 10, 15, 20, 21, 30])
    record = Recorder(10, 20, str(tmp_path / "t"), clock=lambda: next(ticks))
    for what in ("early", "first", "middle", "last", "late", "later"):
        record(what)
    assert record.saved
    assert (tmp_path / "t").read_text() == "10 first\n15 middle\n20 last\n"
    (tmp_path / "t").write_text("")
    record.save()  # at exit as well: the file stays as the first save left it
    assert (tmp_path / "t").read_text() == ""


@pytest.fixture
def restored() -> Iterator[None]:
    add, doubled = Adder.add, twice
    yield
    Adder.add = add  # type: ignore[method-assign]
    globals()["twice"] = doubled


@pytest.mark.usefixtures("restored")
def test_a_trace_point_records_and_leaves_the_call_as_it_was() -> None:
    lines: list[str] = []
    here = __name__
    timeline.install(
        [
            Point(here, "Adder", "add", lambda s, a, *_: f"adds {a}" if a else None),
            Point(here, "Adder", "add", lambda r, s, a, *_: f"made {r}", after=True),
            Point(here, "", "twice", lambda r, n: f"doubled {n}", after=True),
        ],
        lines.append,
    )
    assert Adder().add(2, b=3) == 5  # keyword arguments reach the function, not the point
    assert Adder().add(0) == 0
    assert twice(4) == 8
    assert lines == ["adds 2", "made 5", "made 0", "doubled 4"]


@pytest.mark.parametrize("point", timeline.POINTS + timeline.CONSUMER, ids=lambda p: p.name)
def test_every_point_names_a_function_that_exists(point: Point) -> None:
    home = importlib.import_module(point.module)
    owner = getattr(home, point.owner) if point.owner else home
    assert callable(getattr(owner, point.name))


def test_traces_merge_in_time_order_from_the_stretch_start(tmp_path: Path) -> None:
    (tmp_path / "c").write_text("1500 waits\n4000 has 4 events\n")
    (tmp_path / "i").write_text("2000 took 64 WQEs\n3500 ACK 63\n")
    traces = [("C", str(tmp_path / "c")), ("I", str(tmp_path / "i")), ("T", str(tmp_path / "t"))]
    lines = timeline.merge(traces, 1000)  # T passed no trace point: no file
    assert [line.split(maxsplit=2) for line in lines] == [
        ["0.5", "C", "waits"],
        ["1.0", "I", "took 64 WQEs"],
        ["2.5", "I", "ACK 63"],
        ["3.0", "C", "has 4 events"],
    ]
    assert timeline.middle(lines, 2) == lines[1:3]
    assert timeline.middle(lines, 10) == lines
