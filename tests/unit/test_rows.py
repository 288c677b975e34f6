"""proto/_rows.c, fixed-size entries written from rows of fields: over drawn runs, the
completions it writes are the bytes write_dtos (Python, one object per completion) writes,
and the Write list it packs is proto.batch.WRITE_OP's; a field that does not fit its entry, a
row of the wrong shape or a slot outside the queue raises, and nothing is written past it."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from proto import _rows as rows_c
from proto.batch import WRITE_OP
from proto.constants import CompletionFlags, Dtos
from proto.eventq import EQ_ENTRY_SIZE, eq_ring
from proto.events import write_dtos
from proto.hostif import U32, Ring, RingKind, format_ring, ring_bytes

ENTRIES, EP = 8, 3
FLAGS = [0, 0, int(CompletionFlags.SUPPRESS), int(CompletionFlags.UNSIGNALLED), 0x40, 0x05]


@dataclass
class Dto:
    cookie: int
    length: int
    kind: Dtos
    flags: int


def _queue(start: int) -> Ring:
    view = memoryview(bytearray(ring_bytes(ENTRIES, EQ_ENTRY_SIZE)))
    format_ring(view, RingKind.EQ, ENTRIES, EQ_ENTRY_SIZE)
    producer = eq_ring(view, ENTRIES, True)
    producer.publish(start)
    return producer


def test_completions_are_write_dtos_entries() -> None:
    rng = random.Random(4)
    for _ in range(1000):
        kind = rng.choice([Dtos.SEND, Dtos.RDMA_WRITE, Dtos.RECEIVE])
        dtos = [
            Dto(rng.randrange(1 << 64), rng.randrange(U32), kind, rng.choice(FLAGS))
            for _ in range(rng.randint(0, 12))
        ]
        start, room = rng.randrange(U32), rng.randint(0, ENTRIES)
        python, c = _queue(start), _queue(start)
        want = write_dtos(python, room, EP, dtos)
        rows = [(d.flags, d.cookie, d.length) for d in dtos]
        got = rows_c.write_rows(c.view, c.mine, c.mask, c.entry_size, room, EP, kind, rows, 0, 1, 2)
        assert got == want
        assert bytes(c.view) == bytes(python.view)


def test_the_write_list_is_write_ops() -> None:
    rng = random.Random(5)
    for _ in range(300):
        ops = [(rng.randrange(1 << 64), rng.randrange(U32), rng.randrange(U32)) for _ in range(9)]
        rows = [(0, length, 0, address, context) for address, context, length in ops]
        assert rows_c.pack_writes(rows, 3, 4, 1) == b"".join(WRITE_OP.pack(*op) for op in ops)


@pytest.mark.parametrize(
    "row",
    [(1 << 64, 1, 1), (1, U32, 1), (1, 1, U32), (-1, 1, 1)],
    ids=["address", "rmr_context", "length", "negative"],
)
def test_a_field_that_does_not_fit_raises(row: tuple[int, int, int]) -> None:
    with pytest.raises(OverflowError):
        rows_c.pack_writes([row], 0, 1, 2)


def test_a_row_of_the_wrong_shape_raises_and_a_slot_outside_the_queue_is_refused() -> None:
    for rows in ([(1, 2)], [[1, 2, 3]], [(1, 2, "3")]):
        with pytest.raises(TypeError):
            rows_c.pack_writes(rows, 0, 1, 2)  # type: ignore[arg-type]
    queue = _queue(0)
    with pytest.raises(ValueError, match="outside the queue"):  # a mask past the ring
        rows_c.write_rows(queue.view, 0, 15, EQ_ENTRY_SIZE, 16, EP, 1, [(0, 1, 1)] * 16, 0, 1, 2)
    with pytest.raises(OverflowError):
        rows_c.write_rows(queue.view, 0, 7, EQ_ENTRY_SIZE, 8, EP, 1, [(0, 1, U32)], 0, 1, 2)
    with pytest.raises(BufferError):  # a read-only queue
        rows_c.write_rows(memoryview(b"x" * 4096), 0, 7, EQ_ENTRY_SIZE, 8, EP, 1, [], 0, 1, 2)
