"""The rings of the host interface: what one side writes the other reads, in order, across the
wrap of the indices; and every index or entry that breaks the rules is a RingError, found before
any slot is touched."""

from __future__ import annotations

import itertools

import pytest

from proto.hostif import (
    CONSUMER_LINE,
    PRODUCER_LINE,
    SEGMENT,
    STAGE_BYTES,
    U32,
    WQE,
    Opcode,
    Ring,
    RingError,
    RingKind,
    check_descriptor,
    format_ring,
    read_wqe,
    ring_bytes,
    ring_entries,
    set_u32,
    wqe_size,
    write_wqe,
)
from proto.plainwqe import PLAIN_RECEIVES, PLAIN_REQUESTS, plain_run

ENTRIES, SIZE, MAX_IOV = 4, wqe_size(2), 2


def _pair(start: int = 0) -> tuple[Ring, Ring]:
    view = memoryview(bytearray(ring_bytes(ENTRIES, SIZE)))
    format_ring(view, RingKind.SQ, ENTRIES, SIZE)
    set_u32(view, PRODUCER_LINE, start)
    set_u32(view, CONSUMER_LINE, start)
    return Ring(view, ENTRIES, SIZE, producer=True), Ring(view, ENTRIES, SIZE, producer=False)


def test_sizes_are_lines_and_powers_of_two() -> None:
    assert (WQE.size, SEGMENT.size) == (64, 24)
    assert wqe_size(1) == 128 and wqe_size(16) == 448
    assert [ring_entries(n) for n in (1, 2, 3, 16, 17, 4096)] == [2, 2, 4, 16, 32, 4096]
    with pytest.raises(ValueError):
        ring_entries(0)


@pytest.mark.parametrize("start", [0, U32 - 3], ids=["from zero", "across the u32 wrap"])
def test_what_the_producer_writes_the_consumer_reads_in_order(start: int) -> None:
    producer, consumer = _pair(start)
    cookie = 0
    for _ in range(3):  # three laps of a four-slot ring
        assert producer.space() == ENTRIES and consumer.available() == 0
        for _ in range(ENTRIES):
            cookie += 1
            write_wqe(producer, Opcode.RDMA_WRITE, 0, cookie, [(4096, 64, 7)], (8192, 64, 9))
            producer.publish()
        assert producer.space() == 0 and consumer.available() == ENTRIES
        for expect in range(cookie - ENTRIES + 1, cookie + 1):
            wqe = read_wqe(consumer, consumer.mine, MAX_IOV)
            consumer.publish()
            assert (wqe.opcode, wqe.cookie, wqe.segments, wqe.remote) == (
                Opcode.RDMA_WRITE,
                expect,
                ((4096, 64, 7),),
                (8192, 64, 9),
            )


@pytest.mark.parametrize(
    ("prod", "why"), [(ENTRIES + 1, "past the ring"), (U32 - 1, "running backwards")]
)
def test_a_producer_index_out_of_reach_is_refused(prod: int, why: str) -> None:
    _, consumer = _pair()
    set_u32(consumer.view, PRODUCER_LINE, prod)
    with pytest.raises(RingError, match="past the ring or running backwards"):
        consumer.available()


def test_a_consumer_index_out_of_reach_is_refused() -> None:
    producer, _ = _pair()
    set_u32(producer.view, CONSUMER_LINE, 5)
    with pytest.raises(RingError):
        producer.space()


@pytest.mark.parametrize(
    ("opcode", "reserved", "segments", "operands"),
    [
        (0, 0, 1, (0, 0)),
        (9, 0, 1, (0, 0)),
        (int(Opcode.SEND), 2, 1, (0, 0)),
        (int(Opcode.SEND), 0, MAX_IOV + 1, (0, 0)),
        (int(Opcode.RDMA_WRITE), 0, 1, (1, 0)),
        (int(Opcode.FETCH_ADD), 0, 1, (1, 1)),
        (int(Opcode.RDMA_WRITE_IMM), 0, 1, (U32, 0)),
        (int(Opcode.RDMA_WRITE_IMM), 0, 1, (1, 1)),
    ],
    ids=[
        "zero opcode",
        "unknown opcode",
        "unknown WQE flag",
        "too many segments",
        "an operand on a Write",
        "a compare on fetch-and-add",
        "an immediate past 32 bits",
        "a compare on a Write with immediate",
    ],
)
def test_a_malformed_wqe_is_refused(
    opcode: int, reserved: int, segments: int, operands: tuple[int, int]
) -> None:
    producer, consumer = _pair()
    at = producer.slot(0)
    WQE.pack_into(producer.view, at, opcode, reserved, segments, 0, 1, 0, 0, 0, 0, *operands)
    producer.publish()
    with pytest.raises(RingError):
        read_wqe(consumer, 0, MAX_IOV)


@pytest.mark.parametrize(
    ("opcode", "operands"),
    [
        (Opcode.FETCH_ADD, (2**64 - 1, 0)),
        (Opcode.CMP_SWAP, (0x98765, 0x12345)),
        (Opcode.RDMA_WRITE_IMM, (U32 - 1, 0)),
    ],
    ids=["fetch-and-add", "compare-and-swap", "write with immediate"],
)
def test_the_extensions_operands_read_back(opcode: Opcode, operands: tuple[int, int]) -> None:
    producer, consumer = _pair()
    write_wqe(producer, opcode, 0, 1, [(4096, 8, 7)], (8192, 8, 9), operands=operands)
    producer.publish()
    wqe = read_wqe(consumer, 0, MAX_IOV)
    assert (wqe.opcode, wqe.operands, wqe.remote) == (opcode, operands, (8192, 8, 9))


def test_a_staged_wqe_reads_back_with_its_stage_offset() -> None:
    producer, consumer = _pair()
    write_wqe(producer, Opcode.SEND, 0, 1, [(4096, 100, 7)], stage=STAGE_BYTES - 100)
    producer.publish()
    write_wqe(producer, Opcode.SEND, 0, 2, [(4096, 100, 7)])
    producer.publish()
    assert read_wqe(consumer, 0, MAX_IOV).stage == STAGE_BYTES - 100
    assert read_wqe(consumer, 1, MAX_IOV).stage is None


_PLAIN_CASES = list(
    itertools.product(
        [*map(int, Opcode), 0, 9],  # opcode
        [0, 1, 2, 3],  # WQE flags: STAGED is 1
        [0, 1, 2],  # num_segments
        [0, 0x01, 0x08, 0x40],  # completion_flags: 0x08 is BARRIER_FENCE
        [0, 64, STAGE_BYTES - 100, STAGE_BYTES - 64],  # stage offset
        [(0, 0), (1, 0), (0, 1), (U32, 0)],  # operand, compare
        [64, 100],  # the segment's length
    )
)


@pytest.mark.parametrize(
    ("opcodes", "common"),
    [
        (PLAIN_REQUESTS, {Opcode.SEND, Opcode.RDMA_WRITE}),
        (PLAIN_RECEIVES, {Opcode.RECEIVE}),
    ],
    ids=["requests", "receives"],
)
def test_a_plain_wqe_is_one_read_wqe_accepts_as_the_common_post(
    opcodes: frozenset[int], common: set[Opcode]
) -> None:
    """plain_run (the daemon's path for the common post, and receive) answers exactly the
    one-segment WQEs of ``opcodes`` without operands that read_wqe accepts, with the same
    fields, and nothing read_wqe refuses: every combination of the fields either reader
    looks at."""
    for opcode, wqe_flags, count, flags, offset, operands, length in _PLAIN_CASES:
        producer, consumer = _pair()
        at = producer.slot(0)
        head = (opcode, wqe_flags, count, flags, 12345, 8192, length, 9, offset, *operands)
        segment = (4096, length, 7)
        WQE.pack_into(producer.view, at, *head)
        SEGMENT.pack_into(producer.view, at + WQE.size, *segment)
        producer.publish()
        case = f"{head} {segment}"
        run = plain_run(consumer, opcodes)
        assert consumer.mine == 0, "plain_run takes nothing"
        plain = run[0] if run else None
        try:
            wqe = read_wqe(consumer, 0, MAX_IOV)
        except RingError:
            assert plain is None, case
            continue
        one = wqe.opcode in common and count == 1
        assert (plain is not None) == (one and wqe.operands == (0, 0)), case
        if plain is not None:
            assert plain == (*head, *segment), case
            stage = offset if wqe_flags else None
            assert (wqe.flags, wqe.cookie, wqe.remote, wqe.stage) == (
                flags,
                12345,
                (8192, length, 9),
                stage,
            )
            assert wqe.segments == (segment,), case


def test_a_plain_run_stops_at_the_first_other_wqe_and_at_the_rings_end() -> None:
    """plain_run gives the plain WQEs from the index on, in order: up to the first that is not
    one (not past it), and up to the ring's last slot, whatever the bytes after the ring
    hold (the slots after the wrap are the next run)."""
    view = memoryview(bytearray(ring_bytes(ENTRIES, SIZE) + SIZE))
    format_ring(view, RingKind.SQ, ENTRIES, SIZE)
    for line in (PRODUCER_LINE, CONSUMER_LINE):
        set_u32(view, line, ENTRIES - 2)
    producer, consumer = Ring(view, ENTRIES, SIZE, True), Ring(view, ENTRIES, SIZE, False)
    for cookie in range(3):  # the third wraps to slot 0
        write_wqe(producer, Opcode.SEND, 0, cookie, [(4096, 8, 7)])
        producer.publish()
    view[-SIZE:] = view[producer.slot(0) : producer.slot(0) + SIZE]  # a Send past the ring
    assert [wqe[4] for wqe in plain_run(consumer)] == [0, 1], "to the ring's end"
    consumer.publish(2)
    assert [wqe[4] for wqe in plain_run(consumer)] == [2]
    consumer.publish()
    for opcode, cookie in ((Opcode.RDMA_WRITE, 3), (Opcode.RDMA_READ, 4), (Opcode.SEND, 5)):
        write_wqe(producer, opcode, 0, cookie, [(4096, 8, 7)], (8192, 8, 9))
        producer.publish()
    assert [wqe[4] for wqe in plain_run(consumer)] == [3], "up to the Read"
    assert plain_run(consumer, PLAIN_RECEIVES) == [], "a Write is no plain receive"


def test_a_descriptor_names_its_kind_and_geometry() -> None:
    producer, _ = _pair()
    check_descriptor(producer.view, RingKind.SQ, ENTRIES, SIZE)
    for kind, entries, size in ((RingKind.RQ, ENTRIES, SIZE), (RingKind.SQ, 8, SIZE)):
        with pytest.raises(RingError):
            check_descriptor(producer.view, kind, entries, size)
