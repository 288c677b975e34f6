"""fabricd/_landing.c, where a batch of Writes lands, against MemoryRegistry's Reach: for
batches drawn around the key's range (inside, at its edges, across them, empty, another key),
it gives each Write's bytes exactly where Reach.bytes puts them when every Write of the batch
passes, and declines (None) any other batch, which the Python loop then answers. Ranges,
against a merge written out in Python: the same bytes, merged where they overlap or touch,
and None for a batch under more than one key."""

from __future__ import annotations

import random

import pytest

from fabricd import _landing as landing
from fabricd.memory import Lmr, Reach
from proto.checks import Region
from proto.constants import MemPriv

ORIGIN, LENGTH = 0x40000, 8192
LMR = Lmr(1, 1, Region(ORIGIN, LENGTH, 1, MemPriv.ALL), "seg",
          memoryview(bytearray(random.Random(1).randbytes(LENGTH))), 1, 11)  # fmt: skip
WINDOW = Region(ORIGIN + 1024, 4096, 1, MemPriv.ALL)  # an RMR over part of the LMR
KEY = 21


def _op(rng: random.Random) -> tuple[int, int, int]:
    length = rng.choice([1, 64, 4096, 4096, 0, 5000])
    start, end = WINDOW.address, WINDOW.address + WINDOW.length
    address = rng.choice([start, start + 100, end - length, end - length + 1, start - 1])
    return address, rng.choice([KEY] * 12 + [KEY + 1]), length


def test_views_are_reach_bytes_for_a_batch_that_passes_and_none_for_any_other() -> None:
    rng = random.Random(5)
    reach = Reach(WINDOW, LMR)
    landed = 0
    for _ in range(4000):
        ops = [_op(rng) for _ in range(rng.randint(1, 6))]
        want = [reach.bytes(a, n) for a, _, n in ops]
        every = all(
            v is not None and n and key == KEY for v, (_, key, n) in zip(want, ops, strict=True)
        )
        got = landing.views(ops, KEY, reach.start, reach.end, reach.origin, reach.target)
        if not every:
            assert got is None, ops
            continue
        landed += 1
        assert got is not None, ops
        assert [bytes(v) for v in got] == [bytes(v) for v in want if v is not None]
    assert landed > 200, "the draw reaches the common batch often"


def test_a_view_writes_into_the_lmrs_buffer() -> None:
    views = landing.views([(WINDOW.address, KEY, 4)], KEY, WINDOW.address,
                          WINDOW.address + WINDOW.length, ORIGIN, LMR.view)  # fmt: skip
    assert views is not None
    views[0][:] = b"land"
    assert bytes(LMR.view[1024:1028]) == b"land"


@pytest.mark.parametrize(
    ("start", "end", "origin", "target_bytes"),
    [
        (ORIGIN, ORIGIN + LENGTH + 1, ORIGIN, LENGTH),  # a range past the target
        (ORIGIN - 1, ORIGIN + 16, ORIGIN, LENGTH),  # a range before it
        (ORIGIN + 16, ORIGIN, ORIGIN, LENGTH),  # a range that ends before it starts
        (ORIGIN, ORIGIN + 64, -1, LENGTH),  # not a u64
    ],
)
def test_a_range_outside_its_target_is_declined(
    start: int, end: int, origin: int, target_bytes: int
) -> None:
    ops = [(ORIGIN, KEY, 8)]
    assert landing.views(ops, KEY, start, end, origin, LMR.view[:target_bytes]) is None


def test_anything_but_three_ints_per_write_is_declined_and_wrong_types_raise() -> None:
    start, end = WINDOW.address, WINDOW.address + WINDOW.length
    for op in [
        (start, KEY),
        (start, KEY, 8, 0),
        (start, KEY, True),
        (start, KEY, -8),
        [start, KEY, 8],
    ]:
        assert landing.views([op], KEY, start, end, ORIGIN, LMR.view) is None  # type: ignore[list-item]
    with pytest.raises(TypeError):
        landing.views((), KEY, start, end, ORIGIN, LMR.view)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        landing.views([], KEY, start, end, ORIGIN, bytearray(8))  # type: ignore[arg-type]


def _merged(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The reference: sorted, then each pair that starts at or before the last one's end
    joins it."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(pairs):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def test_merge_and_ranges_are_the_reference_merge() -> None:
    rng = random.Random(9)
    for _ in range(3000):
        ops = [
            (rng.choice([0, 4096, 8192, 100, 2**64 - 8]), KEY, rng.choice([0, 1, 64, 4096, 8]))
            for _ in range(rng.randint(0, 8))
        ]
        pairs = [(a, a + n) for a, _, n in ops if n]
        fits = all(a + n <= 2**64 - 1 for a, _, n in ops)
        if fits:  # (an end past 2**64 is no u64: merge refuses it, ranges declines it)
            assert landing.merge(pairs) == _merged(pairs)
        assert landing.ranges(ops, KEY) == (_merged(pairs) if fits else None)
        if ops:
            other = [*ops[:-1], (ops[-1][0], KEY + 1, ops[-1][2])]
            assert landing.ranges(other, KEY) is None, "another key: the caller's loop"


def test_ranges_and_merge_refuse_what_is_not_theirs() -> None:
    assert landing.ranges([(1, KEY, 2), (1, KEY)], KEY) is None  # type: ignore[list-item]
    assert landing.ranges([(1, KEY, -1)], KEY) is None
    assert landing.ranges([(1, KEY, 2)], -1) is None
    with pytest.raises(TypeError):
        landing.ranges((1, KEY, 2), KEY)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        landing.merge([(5, 4)])
    with pytest.raises(TypeError):
        landing.merge([(1, 2, 3)])  # type: ignore[list-item]
