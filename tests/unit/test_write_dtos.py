"""write_dtos, the NIC's path for a run of successful completions: each entry reads back as
the completion encode_event describes, SUPPRESS gives none, UNSIGNALLED one that wakes nobody,
and the queue's room is never exceeded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proto.constants import CompletionFlags, DtoCompletionStatus, Dtos, EventNumber
from proto.eventq import EQ_ENTRY_SIZE, eq_ring, newest_length, read_eqe
from proto.events import (
    RECEIVED_AT,
    DtoCompletion,
    decode_event,
    encode_event,
    write_dtos,
    write_rows,
)
from proto.hostif import Ring, RingKind, format_ring, ring_bytes
from proto.plainwqe import PLAIN_AT

ENTRIES, EVD, EP = 8, 5, 3
SUPPRESS, UNSIGNALLED = int(CompletionFlags.SUPPRESS), int(CompletionFlags.UNSIGNALLED)


@dataclass
class Dto:
    cookie: int
    length: int
    kind: Dtos
    flags: int = 0


def _queue(start: int = 0) -> tuple[Ring, Ring]:
    view = memoryview(bytearray(ring_bytes(ENTRIES, EQ_ENTRY_SIZE)))
    format_ring(view, RingKind.EQ, ENTRIES, EQ_ENTRY_SIZE)
    producer, consumer = eq_ring(view, ENTRIES, True), eq_ring(view, ENTRIES, False)
    producer.publish(start)
    consumer.publish(start)
    return producer, consumer


def test_a_run_reads_back_as_the_completions_encode_event_describes() -> None:
    producer, consumer = _queue(start=ENTRIES - 2)  # the run wraps past the ring's end
    dtos = [
        Dto(1, 64, Dtos.RDMA_WRITE),
        Dto(2, 0, Dtos.SEND, SUPPRESS),
        Dto(3, 16, Dtos.SEND, UNSIGNALLED),
        Dto(4, 8, Dtos.IB_RDMA_WRITE_IMMED),
        Dto(5, 100, Dtos.RECEIVE),
    ]
    assert write_dtos(producer, ENTRIES, EP, dtos) == (4, False)
    producer.publish(4)
    ok = DtoCompletionStatus.DTO_SUCCESS
    for dto in (d for d in dtos if not d.flags & SUPPRESS):
        number, flags, head, body = read_eqe(consumer, consumer.mine)
        consumer.publish()
        notify = not dto.flags & UNSIGNALLED
        record = DtoCompletion(EVD, EP, dto.cookie, ok, dto.length, dto.kind, notify)
        expected = EventNumber.IB_DTO_EVENT if dto.kind >= Dtos.IB_RDMA_WRITE_IMMED else None
        assert (flags, head, bytes(body)) == encode_event(
            expected or EventNumber.DTO_COMPLETION_EVENT, record
        )
        assert decode_event(EVD, number, flags, head, body)[1] == record


def test_a_run_stops_at_the_queues_room() -> None:
    producer, _ = _queue()
    dtos = [Dto(1, 8, Dtos.SEND, SUPPRESS), Dto(2, 8, Dtos.SEND), Dto(3, 8, Dtos.SEND)]
    assert write_dtos(producer, 1, EP, dtos) == (1, True)
    assert write_dtos(producer, 2, EP, dtos) == (2, False)
    assert write_dtos(producer, 0, EP, dtos[:1]) == (0, False)  # a SUPPRESSed one takes no room


def _entries(write: Callable[..., tuple[int, bool]], *args: object) -> tuple[object, bytes]:
    """What ``write(queue, *args)`` returns on a fresh queue that wraps, and the queue's bytes
    after it."""
    producer, _ = _queue(start=ENTRIES - 2)
    result = write(producer, *args)
    return result, bytes(producer.view)


def test_rows_give_the_entries_write_dtos_gives() -> None:
    """A run's plain WQEs (PLAIN_AT: flags, cookie and length at 3, 4, 12) and a run of
    receives (RECEIVED_AT) are written as their Ops / receives would be."""
    flags = [0, SUPPRESS, UNSIGNALLED, 0, UNSIGNALLED | SUPPRESS, 0]
    writes = [Dto(10 + i, 8 * i, Dtos.RDMA_WRITE, f) for i, f in enumerate(flags)]
    wqes = [(1, 0, 1, d.flags, d.cookie, 7, 8, 9, 0, 0, 0, 4096, d.length, 5) for d in writes]
    for room in (ENTRIES, 2):
        expected = _entries(write_dtos, room, EP, writes)
        assert _entries(write_rows, room, EP, Dtos.RDMA_WRITE, wqes, PLAIN_AT) == expected
    receives = [Dto(20 + i, i, Dtos.RECEIVE) for i in range(5)]
    rows = [(0, d.cookie, d.length) for d in receives]
    expected = _entries(write_dtos, ENTRIES, EP, receives)
    assert _entries(write_rows, ENTRIES, EP, Dtos.RECEIVE, rows, RECEIVED_AT) == expected
    assert expected[0] == (5, False)


def test_newest_length_reads_the_newest_entrys_length_across_the_wrap() -> None:
    """eventq.newest_length (Events.bulk asks it at every retire): the ``length`` of the entry
    written last, not its cookie's or aux's bytes, also when that entry is the ring's last slot
    or its first after the wrap."""
    producer, _ = _queue(start=ENTRIES - 2)
    for cookie, length in ((7, 70_000), (8, 12), (9, 16_384)):
        assert write_dtos(producer, ENTRIES, EP, [Dto(cookie, length, Dtos.RDMA_WRITE)]) == (
            1,
            False,
        )
        producer.publish(1)
        assert newest_length(producer) == length
