"""proto/_scatter.c, a payload's bytes copied into its sink's views: whatever the chunks the
stream delivers, the views end up holding the payload in order, each view once, and nothing
around them changes; a sink of anything but writable byte views is a TypeError, not a write."""

from __future__ import annotations

import random

import pytest

from proto import _scatter as scatter


def test_chunks_fill_the_views_in_order_and_nothing_else() -> None:
    rng = random.Random(3)
    for _ in range(500):
        memory = bytearray(4096)
        cuts = sorted(rng.sample(range(1, 4095), rng.randint(1, 12)))
        spans = [
            (a, b) for a, b in zip([0, *cuts], [*cuts, 4096], strict=True) if rng.random() < 0.7
        ]
        sink = [memoryview(memory)[a:b] for a, b in spans]
        sink.insert(rng.randrange(len(sink) + 1), memoryview(memory)[0:0])  # an empty one
        views, total = scatter.views(sink)
        assert total == sum(b - a for a, b in spans) and all(len(v) for v in views)
        payload = rng.randbytes(total)
        at = 0
        while at < total:
            n = rng.randint(1, 700)
            assert scatter.fill(views, payload[at : at + n]) == min(n, total - at)
            at += n
        assert views == [], "every view filled leaves the list"
        expected, at = bytearray(4096), 0
        for a, b in spans:
            expected[a:b] = payload[at : at + b - a]
            at += b - a
        assert memory == expected


def test_bytes_past_the_views_are_counted_out() -> None:
    memory = bytearray(8)
    views, _ = scatter.views([memoryview(memory)[2:6]])
    assert scatter.fill(views, b"abcdefgh") == 4
    assert memory == bytearray(b"\0\0abcd\0\0") and views == []


def test_views_of_other_shapes_are_cast_to_bytes() -> None:
    memory = bytearray(8)
    views, total = scatter.views([memoryview(memory).cast("I")])
    assert total == 8 and views[0].format == "B"
    scatter.fill(views, b"12345678")
    assert memory == b"12345678"


@pytest.mark.parametrize(
    "sink",
    [
        [memoryview(b"read-only")],
        [bytearray(4)],
        [memoryview(bytearray(16))[::2]],
    ],
    ids=["read-only", "not a view", "strided"],
)
def test_a_sink_of_anything_but_writable_byte_views_raises(sink: list[memoryview]) -> None:
    with pytest.raises(TypeError):
        scatter.views(sink)
    with pytest.raises(TypeError):
        scatter.fill(list(sink), b"x")
