"""Exact boundaries of remote access, against an LMR and against a bound RMR window: an access
ending at the last byte succeeds; one running one byte past, or starting one byte before, fails
with DTO_ERR_REMOTE_ACCESS and moves no byte; a zero-length access at the end succeeds."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, MemPriv
from proto.constants import EventNumber as E
from tests.core.flows import Side, pair
from tests.core.harness import Fabric

DTO = E.DTO_COMPLETION_EVENT
WINDOW_AT, WINDOW_LEN = 1024, 64  # b's window: [1024, 1088) of its 4096-byte LMR
SIZE = 4096
B_FILL, A_FILL = 0xBB, 0xAA


@dataclass
class Target:
    """The remote range under test: [start, start + length) of b's memory, under ``key``."""

    start: int
    length: int
    key: int


def _setup(kind: str) -> tuple[Fabric, Side, Side, Target]:
    fabric, a, b = pair(size=SIZE)
    b.memory()[:] = bytes([B_FILL]) * SIZE
    a.memory()[:] = bytes(range(256)) * (SIZE // 256)
    if kind == "lmr":
        return fabric, a, b, Target(0, SIZE, b.lmr.rmr_context)
    core = b.c.core
    rmr = b.c.call(core.rmr_create(b.pz))
    privileges = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE
    key = b.c.call(
        core.rmr_bind(rmr, b.lmr.handle, b.triplet(WINDOW_AT, WINDOW_LEN), privileges, b.ep, 1, 0)
    )
    fabric.run()
    assert b.log() == [(E.RMR_BIND_COMPLETION_EVENT, 1, St.DTO_SUCCESS)]
    return fabric, a, b, Target(WINDOW_AT, WINDOW_LEN, key)


def _access(fabric: Fabric, a: Side, b: Side, op: Dtos, at: int, n: int, key: int) -> None:
    """One RDMA access of ``n`` bytes at b's offset ``at`` (a's bytes 0..n, or into 2048..)."""
    local = a.triplet(0, n) if op == Dtos.RDMA_WRITE else a.triplet(2048, n)
    a.c.post(op, a.ep, [local], 9, [b.address + at, n, key], 0)
    fabric.run()


KINDS = ["lmr", "window"]
OPS = [Dtos.RDMA_WRITE, Dtos.RDMA_READ]


@pytest.mark.parametrize("op", OPS, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", KINDS)
def test_an_access_ending_at_the_last_byte_succeeds(kind: str, op: Dtos) -> None:
    fabric, a, b, t = _setup(kind)
    at = t.start + t.length - 16
    b.memory(at, 16)[:] = b"the last sixteen"
    before = bytes(a.memory())
    _access(fabric, a, b, op, at, 16, t.key)
    assert a.log() == [(DTO, 9, St.DTO_SUCCESS, 16)]
    if op == Dtos.RDMA_WRITE:
        assert bytes(b.memory(at, 16)) == bytes(range(16))
    else:
        assert bytes(a.memory(2048, 16)) == b"the last sixteen"
        assert bytes(a.memory(0, 2048)) + bytes(a.memory(2064)) == before[:2048] + before[2064:]
    if at + 16 < SIZE:
        assert b.memory(at + 16, 1)[0] == B_FILL


@pytest.mark.parametrize("op", OPS, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["one byte past the end", "one byte before the start"])
def test_an_access_one_byte_outside_fails_and_moves_nothing(
    kind: str, op: Dtos, where: str
) -> None:
    fabric, a, b, t = _setup(kind)
    # past the end: 16 bytes at offset 49 of a 64-byte window; before: the start minus one
    at = t.start + t.length - 15 if where == "one byte past the end" else t.start - 1
    before_a, before_b = bytes(a.memory()), bytes(b.memory())
    _access(fabric, a, b, op, at, 16, t.key)
    assert a.log() == [(DTO, 9, St.DTO_ERR_REMOTE_ACCESS, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert b.log() == [(E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(b.memory()) == before_b, "not one byte landed, inside the range or outside"
    assert bytes(a.memory()) == before_a, "not one byte was read"


@pytest.mark.parametrize("op", OPS, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", KINDS)
def test_a_zero_length_access_at_the_end_succeeds(kind: str, op: Dtos) -> None:
    fabric, a, b, t = _setup(kind)
    before_a, before_b = bytes(a.memory()), bytes(b.memory())
    _access(fabric, a, b, op, t.start + t.length, 0, t.key)
    assert a.log() == [(DTO, 9, St.DTO_SUCCESS, 0)]
    assert bytes(a.memory()) == before_a and bytes(b.memory()) == before_b
    # and the connection is still good
    _access(fabric, a, b, Dtos.RDMA_WRITE, t.start, 4, t.key)
    assert a.log() == [(DTO, 9, St.DTO_SUCCESS, 4)]


def test_the_window_key_reaches_only_the_window_though_the_lmr_goes_on() -> None:
    fabric, a, b, t = _setup("window")
    _access(fabric, a, b, Dtos.RDMA_WRITE, WINDOW_AT + WINDOW_LEN, 1, t.key)
    assert a.log() == [(DTO, 9, St.DTO_ERR_REMOTE_ACCESS, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert b.memory(WINDOW_AT + WINDOW_LEN, 1)[0] == B_FILL
