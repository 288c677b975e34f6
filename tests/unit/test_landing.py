"""fabricd/_landing.c, where a batch lands. Writes, against MemoryRegistry's Reach: for
batches drawn around the key's range (inside, at its edges, across them, empty, another key),
it gives each Write's bytes exactly where Reach.bytes puts them when every Write of the batch
passes, and declines (None) any other batch, which the Python loop then answers. Sends,
against send_run.SendRun's rule for the common receive: it lands the same Sends in the same
receives, and stops before the first receive the Python path must take. The lane, against the
lone-Write rule of fabricd/nic/lane.py written with the codec's decode_header and Reach: on
streams of frames of every kind, whole, cut or malformed, it lands the same Writes in the same
bytes, stops at the same frame and reports the same last sequence number; the initiator's lane
for ACKs likewise, against [ACK, 0, seq] decoded by the codec."""

from __future__ import annotations

import functools
import random
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from fabricd import _landing as landing
from fabricd.memory import Lmr, Reach
from fabricd.nic.objects import Recv
from proto.checks import Region
from proto.codec import Frame, decode_header, encode
from proto.constants import MemPriv
from proto.errors import ProtocolError
from proto.frames import MAX_HEADER_LEN, FrameType

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


WRITE = int(FrameType.WRITE)
ACK = int(FrameType.ACK)


def _header_at(view: memoryview, start: int, end: int) -> tuple[Frame, int] | None:
    """The frame at view[start:end]'s head when its header is whole and decodes (the codec's
    decode_header), and where its payload starts; None when not."""
    if end - start <= 4:
        return None
    (hlen,) = struct.unpack_from(">I", view, start)
    head = start + 4 + hlen
    if not 0 < hlen <= MAX_HEADER_LEN or head > end:
        return None
    try:
        return decode_header(view[start + 4 : head]), head
    except ProtocolError:
        return None


def _lane_by_the_rules(
    view: memoryview, start: int, end: int, grants: dict[int, Reach], acked: int,
    before: Callable[[], None],
) -> tuple[int, int]:  # fmt: skip
    """fabricd/nic/lane.py's rule, frame by frame: the next Write in order, whole, under a
    granted key, inside its range."""
    ready = False
    while (found := _header_at(view, start, end)) is not None:
        frame, head = found
        size = frame.payload_len
        if frame.type is not FrameType.WRITE or not size or head + size > end:
            break
        seq, address, key = frame.fields
        if type(seq) is not int or seq != acked + 1 or type(key) is not int:
            break
        reach = grants.get(key)
        target = None if reach is None or type(address) is not int else reach.bytes(address, size)
        if target is None:
            break
        if not ready:
            before()
            ready = True
        target[:] = view[head : head + size]
        acked, start = seq, head + size
    return start, acked


def _frame(rng: random.Random, seq: int) -> bytes:
    """One frame of a peer's stream: mostly the next lone Write, else one of each kind the
    lane must leave to the long way."""
    n = rng.choice([1, 64, 64, 300])
    lo, hi = WINDOW.address, WINDOW.address + WINDOW.length
    address = rng.choice([lo, lo + 8, hi - n, hi - n + 1, lo - 1, hi])
    fields: list[Any] = [seq, address, rng.choice([KEY] * 8 + [KEY + 1, KEY + 2])]
    kind = rng.choices(
        ["write", "dup", "ack", "fields", "str", "bool", "garbage", "empty", "big"],
        [30, 1, 1, 1, 1, 1, 1, 1, 1],
    )[0]
    if kind == "dup":
        fields[0] = seq - 1
    elif kind == "ack":
        return encode(FrameType.ACK, seq)
    elif kind == "fields":
        fields.append(0)
    elif kind == "str":
        fields[1] = "address"
    elif kind == "bool":
        fields[2] = True
    elif kind == "garbage":
        return struct.pack(">I", 3) + b"\xc1\xc1\xc1"
    elif kind == "empty":
        n = 0
    elif kind == "big":
        fields[1] = rng.choice([(1 << 64) - 1, -5])
    payload = rng.randbytes(n)
    return encode(FrameType.WRITE, *fields, payload_len=n) + payload


def test_the_lane_lands_what_the_rule_lands_and_stops_where_it_stops() -> None:
    rng = random.Random(11)
    landed = 0
    for _ in range(1500):
        acked = rng.randrange(1, 1000)
        stream = b"".join(_frame(rng, acked + 1 + k) for k in range(rng.randint(1, 6)))
        stream = stream[: rng.choice([len(stream)] * 3 + [rng.randrange(len(stream) + 1)])]
        skip = rng.randint(0, 7)
        buf = memoryview(bytearray(rng.randbytes(skip)) + stream + bytearray(3))
        start, end = skip, skip + len(stream)
        sides = []
        for _ in range(2):
            memory = memoryview(bytearray(LMR.view))
            lmr = Lmr(1, 1, LMR.region, "seg", memory, 1, 11)
            grants = {KEY: Reach(WINDOW, lmr), KEY + 1: Reach(LMR.region, lmr)}
            calls: list[int] = []
            sides.append((memory, grants, calls))
        (want_mem, want_grants, want_calls), (got_mem, got_grants, got_calls) = sides
        want = _lane_by_the_rules(
            buf, start, end, want_grants, acked, functools.partial(want_calls.append, 1)
        )
        got = landing.lane(
            buf,
            start,
            end,
            got_grants,
            acked,
            functools.partial(got_calls.append, 1),
            WRITE,
            MAX_HEADER_LEN,
        )
        assert got == want and got_mem == want_mem and got_calls == want_calls
        landed += want[1] - acked
    assert landed > 500, "the draw reaches the common Write often"


def test_the_lane_stops_at_a_header_length_outside_its_bounds() -> None:
    reach = {KEY: Reach(WINDOW, LMR)}
    write = encode(FrameType.WRITE, 1, WINDOW.address, KEY, payload_len=4) + b"land"
    for head in [struct.pack(">I", 0), struct.pack(">I", MAX_HEADER_LEN + 1), b"\0\0"]:
        buf = memoryview(bytearray(write + head + b"\x94" * 8))
        assert landing.lane(buf, 0, len(buf), reach, 0, lambda: None, WRITE, MAX_HEADER_LEN) == (
            len(write),
            1,
        )


def test_an_exception_in_before_lands_nothing_and_propagates() -> None:
    memory = memoryview(bytearray(LMR.view))
    lmr = Lmr(1, 1, LMR.region, "seg", memory, 1, 11)
    write = encode(FrameType.WRITE, 1, WINDOW.address, KEY, payload_len=4) + b"land"

    def before() -> None:
        raise RuntimeError("the flush failed")

    with pytest.raises(RuntimeError, match="the flush failed"):
        landing.lane(memoryview(write), 0, len(write), {KEY: Reach(WINDOW, lmr)}, 0, before,
                     WRITE, MAX_HEADER_LEN)  # fmt: skip
    assert memory == LMR.view


def test_the_lane_refuses_arguments_of_the_wrong_kind() -> None:
    buf = memoryview(bytearray(16))
    cases: list[tuple[Any, ...]] = [
        (bytearray(16), 0, 16, {}, 0),  # not a memoryview
        (buf, 0, 17, {}, 0),  # a range past the buffer
        (buf, 8, 4, {}, 0),  # a range that ends before it starts
        (buf, 0, 16, [], 0),  # grants not a dict
    ]
    lane: Callable[..., object] = landing.lane
    for args in cases:
        with pytest.raises(TypeError):
            lane(*args, lambda: None, WRITE, MAX_HEADER_LEN)
    with pytest.raises(TypeError):
        landing.lane(buf, "0", 16, {}, 0, lambda: None, WRITE, MAX_HEADER_LEN)  # type: ignore[arg-type]


def _acks_by_the_rules(
    view: memoryview, start: int, end: int, acked: int, limit: int
) -> tuple[int, int]:
    """fabricd/nic/lane.py's take_acks, frame by frame: ACKs without payload, each of a
    sequence number (a u64) that was sent, below ``limit``."""
    while (found := _header_at(view, start, end)) is not None:
        frame, head = found
        (seq, *_) = frame.fields or [None]
        if frame.type is not FrameType.ACK or frame.payload_len or type(seq) is not int:
            break
        if not 0 <= seq < limit:
            break
        acked, start = max(acked, seq), head
    return start, acked


def _ack_frame(rng: random.Random, limit: int) -> bytes:
    kind = rng.choices(["ack", "old", "unsent", "negative", "payload", "write", "str"],
                       [20, 3, 1, 1, 1, 1, 1])[0]  # fmt: skip
    seq = rng.randrange(limit // 2, limit)
    if kind == "old":
        seq = rng.randrange(limit // 2)
    elif kind == "unsent":
        seq = limit + rng.randrange(3)
    elif kind == "negative":
        seq = -1
    elif kind == "payload":
        return encode(FrameType.ACK, seq, payload_len=1) + b"x"
    elif kind == "write":
        return encode(FrameType.WRITE, seq, WINDOW.address, KEY, payload_len=1) + b"x"
    elif kind == "str":
        return encode(FrameType.ACK, str(seq))
    return encode(FrameType.ACK, seq)


def test_the_ack_lane_takes_what_the_rule_takes_and_stops_where_it_stops() -> None:
    rng = random.Random(12)
    taken = 0
    for _ in range(2000):
        limit = rng.choice([2, 100, 1 << 20, 1 << 40])
        acked = rng.randrange(limit)
        stream = b"".join(_ack_frame(rng, limit) for _ in range(rng.randint(1, 6)))
        stream = stream[: rng.choice([len(stream)] * 3 + [rng.randrange(len(stream) + 1)])]
        skip = rng.randint(0, 7)
        buf = memoryview(bytearray(rng.randbytes(skip)) + stream + bytearray(2))
        start, end = skip, skip + len(stream)
        want = _acks_by_the_rules(buf, start, end, acked, limit)
        assert landing.acks(buf, start, end, acked, limit, ACK, MAX_HEADER_LEN) == want
        taken += want[0] > start
    assert taken > 1000, "the draw reaches the common ACK often"


def test_the_ack_lane_refuses_arguments_of_the_wrong_kind() -> None:
    buf = memoryview(bytearray(16))
    acks: Callable[..., object] = landing.acks
    for args in [(buf, 0, 17, 0, 1), (buf, 0, 16, -1, 1), (buf, 0, 16, 0, "1"), (b"", 0, 0, 0, 1)]:
        with pytest.raises(TypeError):
            acks(*args, ACK, MAX_HEADER_LEN)
