"""fabricd/_receives.c, where the Sends of a batch land, against send_run.SendRun's rules:
sends() lands the same Sends in the same common receives (one buffer in shared memory that
holds the Send) and stops before the first receive the Python path must take; planned() plans
Sends for receives in a C program's memory exactly as SendRun.take does."""

from __future__ import annotations

import random
from collections import deque

import pytest

from fabricd import _receives as receives
from fabricd.memory import Lmr
from fabricd.nic.objects import Recv
from fabricd.nic.send_run import SendRun
from proto.checks import Region
from proto.constants import MemPriv
from tests.unit.test_landing import LMR, ORIGIN


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
        got = receives.sends(payload, offset, lengths, start, got_recvs, done, taken, bodies)
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
        receives.sends(b"x" * 8, 0, [16], 0, recvs, [], [], [])
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
        got = receives.planned(
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
        receives.planned(b"x" * 8, 0, [8], 0, recvs, [], [], [], 0, ())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        receives.planned(b"x" * 8, 0, [8], 0, recvs, [], [], [], -1, [])
    assert len(recvs) == 1, "nothing taken"
