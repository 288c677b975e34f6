"""fabricd/_landing.c, where a batch lands. Writes, against MemoryRegistry's Reach: for
batches drawn around the key's range (inside, at its edges, across them, empty, another key),
it gives each Write's bytes exactly where Reach.bytes puts them when every Write of the batch
passes, and declines (None) any other batch, which the Python loop then answers. Sends,
against send_run.SendRun's rule for the common receive: it lands the same Sends in the same
receives, and stops before the first receive the Python path must take; planned() plans
Sends for receives in a C program's memory exactly as SendRun.take does. Ranges, against
a merge written out in Python: the same bytes, merged where they overlap or touch, and None
for a batch under more than one key."""

from __future__ import annotations

import random
from collections import deque

import pytest

from fabricd import _landing as landing
from fabricd.memory import Lmr, Reach
from fabricd.nic.objects import Recv
from fabricd.nic.send_run import SendRun
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


def _receive(rng: random.Random, memory: bytearray, at: int) -> Recv:
    """A receive in ``memory`` at ``at``: mostly the common one, sometimes one of each kind
    sends() must leave to the Python path."""
    size = rng.choice([64, 64, 64, 16, 0])
    view = memoryview(memory)[at : at + size]
    kind = rng.choices(["common", "spans", "two", "capacity", "read-only"], [20, 1, 1, 1, 1])[0]
    views = [view, view[:0]] if kind == "two" else [view]
    if kind == "read-only":
        views = [memoryview(bytes(size))]
    spans = [(LMR, ORIGIN, size)] if kind == "spans" else []
    capacity = size - 1 if kind == "capacity" and size else size
    return Recv(rng.randrange(1 << 64), 0, views, capacity, spans)


def _by_the_rules(
    payload: bytes, lengths: list[int], recvs: deque[Recv]
) -> tuple[int, int, list[tuple[int, int, int]]]:
    """send_run.SendRun.take's common receive, Send by Send (one buffer in shared memory that
    holds the Send)."""
    i, at, done = 0, 0, []
    while i < len(lengths) and recvs:
        recv, n = recvs[0], lengths[i]
        view = recv.views[0]
        if (
            recv.spans
            or len(recv.views) != 1
            or recv.capacity < n
            or view.readonly
            or len(view) < n
        ):
            break
        view[:n] = payload[at : at + n]
        done.append((0, recv.cookie, n))
        recvs.popleft()
        i, at = i + 1, at + n
    return i, at, done


def test_sends_land_in_the_common_receives_as_the_rules_land_them() -> None:
    rng = random.Random(8)
    landed = 0
    for _ in range(2000):
        lengths = [rng.choice([0, 1, 16, 64, 65]) for _ in range(rng.randint(1, 10))]
        payload = rng.randbytes(sum(lengths))
        want_memory, got_memory = bytearray(1024), bytearray(1024)
        seed = rng.random()
        want_recvs = deque(_receive(random.Random(seed), want_memory, 64 * k) for k in range(8))
        got_recvs = deque(_receive(random.Random(seed), got_memory, 64 * k) for k in range(8))
        start = rng.randrange(len(lengths))
        offset = sum(lengths[:start])
        i, at, want_done = _by_the_rules(payload[offset:], lengths[start:], want_recvs)
        done: list[tuple[int, int, int]] = []
        taken: list[Recv] = []
        bodies: list[memoryview] = []
        got = landing.sends(payload, offset, lengths, start, got_recvs, done, taken, bodies)
        assert got == (start + i, offset + at)
        assert done == want_done and got_memory == want_memory
        assert [r.cookie for r in got_recvs] == [r.cookie for r in want_recvs]
        assert [r.cookie for r in taken] == [c for _, c, _ in done]
        assert b"".join(bodies) == payload[offset : offset + at]
        landed += i
    assert landed > 2000, "the draw reaches the common receive often"


def test_a_send_outside_its_payload_raises() -> None:
    recvs = deque([Recv(1, 0, [memoryview(bytearray(64))], 64, [])])
    with pytest.raises(ValueError, match="outside the payload"):
        landing.sends(b"x" * 8, 0, [16], 0, recvs, [], [], [])
    assert len(recvs) == 1, "nothing taken"


def _process_lmr(handle: int, pid: int, freed: bool = False) -> Lmr:
    region = Region(ORIGIN + handle * 0x10000, 4096, 1, MemPriv.ALL)
    lmr = Lmr(handle, 1, region, "", memoryview(bytearray(4096)), handle, 0, pid=pid)
    lmr.freed = freed
    return lmr


PROCESS_LMRS = [_process_lmr(1, 77), _process_lmr(2, 77), _process_lmr(3, 78),
                _process_lmr(4, 77, freed=True)]  # fmt: skip


def _process_receive(rng: random.Random) -> Recv:
    """A receive of one segment in a process's memory, mostly of process 77's live LMRs;
    sometimes one planned() must leave to the Python path."""
    lmr = rng.choices(PROCESS_LMRS, [10, 10, 1, 1])[0]
    size = rng.choice([64, 64, 16, 0])
    address = lmr.region.address + rng.choice([0, 64, 128, 16])
    kind = rng.choices(["one", "shm", "two", "capacity"], [30, 1, 1, 1])[0]
    spans = [(lmr, address, size)] * (2 if kind == "two" else 1) if kind != "shm" else []
    capacity = size - 1 if kind == "capacity" and size else size
    return Recv(rng.randrange(1 << 64), 0, [memoryview(bytearray(size))], capacity, spans)


def test_planned_sends_are_send_run_takes() -> None:
    rng = random.Random(12)
    landed = 0
    for _ in range(2000):
        lengths = [rng.choice([0, 16, 64, 64, 65]) for _ in range(rng.randint(1, 10))]
        payload = memoryview(rng.randbytes(sum(lengths)))
        seed, pid = rng.random(), rng.choice([0, 0, 77, 78])
        want_recvs = deque(_process_receive(random.Random(seed)) for _ in range(8))
        got_recvs = deque(_process_receive(random.Random(seed)) for _ in range(8))
        start = rng.randrange(len(lengths))
        i = start
        at = offset = sum(lengths[:start])
        run = SendRun(1, pid=pid)
        while i < len(lengths) and want_recvs:  # Target._landed's rule, in Python
            recv, n = want_recvs[0], lengths[i]
            if (
                len(recv.spans) != 1
                or n > recv.capacity
                or not run.take(recv, payload[at : at + n], at)
            ):
                break
            want_recvs.popleft()
            i, at = i + 1, at + n
        done: list[tuple[int, int, int]] = []
        taken: list[Recv] = []
        bodies: list[memoryview] = []
        pieces: list[tuple[int, int, int]] = []
        got = landing.planned(
            payload, offset, lengths, start, got_recvs, done, taken, bodies, pid, pieces
        )
        assert got == (i, at, run.pid)
        assert done == run.done and pieces == run.pieces
        assert [r.cookie for r in taken] == [r.cookie for r in run.recvs]
        assert [bytes(b) for b in bodies] == [bytes(b) for b in run.bodies]
        assert [r.cookie for r in got_recvs] == [r.cookie for r in want_recvs]
        landed += i - start
    assert landed > 1000, "the draw reaches the common process receive often"


def test_planned_refuses_what_is_not_a_plan() -> None:
    recvs = deque([Recv(1, 0, [memoryview(bytearray(64))], 64, [])])
    with pytest.raises(TypeError):
        landing.planned(b"x" * 8, 0, [8], 0, recvs, [], [], [], 0, ())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        landing.planned(b"x" * 8, 0, [8], 0, recvs, [], [], [], -1, [])
    assert len(recvs) == 1, "nothing taken"


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
