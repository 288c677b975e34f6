"""fabricd/_lanes.c, the lanes of a peer's read. The Write lane, against the lone-Write rule
of fabricd/nic/lane.py written with the codec's decode_header and Reach: on streams of frames
of every kind, whole, cut or malformed, it lands the same Writes in the same bytes, stops at the
same frame and reports the same last sequence number. The initiator's lane for ACKs likewise,
against [ACK, 0, seq] decoded by the codec; its lane for a Read's answer (read_resp) and the
target's for a lone Read request (request) against their rules written the same way."""

from __future__ import annotations

import ctypes
import functools
import os
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest

from fabricd import _lanes as lanes
from fabricd.memory import Lmr, Reach
from proto.codec import Frame, decode_header, encode, encode_framed
from proto.errors import ProtocolError
from proto.frames import MAX_HEADER_LEN, FrameType
from tests.unit.test_landing import KEY, LMR, WINDOW

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


Put = Callable[[int, int, memoryview, int, int], bool]


def _lane_by_the_rules(
    view: memoryview, start: int, end: int, grants: dict[int, Reach], acked: int,
    before: Callable[[], None], put: Put | None,
) -> tuple[int, int]:  # fmt: skip
    """fabricd/nic/lane.py's rule, frame by frame: the next Write in order, whole, under a
    granted key, inside its range; in a process's memory, put there (its mirror holds the
    bytes either way)."""
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
        assert reach is not None and type(address) is int
        offset = address - reach.origin
        if reach.pid and (put is None or not put(reach.pid, address, reach.target, offset, size)):
            break
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


def _putting(calls: list[object], refuse: int | None) -> Put:
    """A process's memory for the lane: each put recorded, refused at ``refuse``."""

    def put(pid: int, address: int, view: memoryview, offset: int, length: int) -> bool:
        calls.append((pid, address, offset, length, bytes(view[offset : offset + length])))
        return address != refuse

    return put


def test_the_lane_lands_what_the_rule_lands_and_stops_where_it_stops() -> None:
    rng = random.Random(11)
    landed = puts = 0
    for _ in range(1500):
        acked = rng.randrange(1, 1000)
        stream = b"".join(_frame(rng, acked + 1 + k) for k in range(rng.randint(1, 6)))
        stream = stream[: rng.choice([len(stream)] * 3 + [rng.randrange(len(stream) + 1)])]
        skip = rng.randint(0, 7)
        buf = memoryview(bytearray(rng.randbytes(skip)) + stream + bytearray(3))
        start, end = skip, skip + len(stream)
        pid = rng.choice([0, 0, 4242])  # a segment, or a process's memory (a mirror)
        refuse = rng.choice([None, WINDOW.address + 8])  # a process put fails at this address
        sides = []
        for _ in range(2):
            memory = memoryview(bytearray(LMR.view))
            lmr = Lmr(1, 1, LMR.region, "" if pid else "seg", memory, 1, 11, pid=pid)
            grants = {KEY: Reach(WINDOW, lmr), KEY + 1: Reach(LMR.region, lmr)}
            calls: list[object] = []
            sides.append((memory, grants, calls))
        (want_mem, want_grants, want_calls), (got_mem, got_reach, got_calls) = sides
        got_grants = {key: reach.grant() for key, reach in got_reach.items()}  # lane.grant's

        want = _lane_by_the_rules(
            buf, start, end, want_grants, acked, functools.partial(want_calls.append, 1),
            _putting(want_calls, refuse),
        )  # fmt: skip
        got = lanes.lane(
            buf, start, end, got_grants, acked, functools.partial(got_calls.append, 1),
            WRITE, MAX_HEADER_LEN, _putting(got_calls, refuse),
        )  # fmt: skip
        assert got == want and got_mem == want_mem and got_calls == want_calls
        landed += want[1] - acked
        puts += sum(1 for call in want_calls if call != 1)
    assert landed > 500, "the draw reaches the common Write often"
    assert puts > 200, "and often in a process's memory"


def test_a_process_write_without_a_way_in_takes_the_long_way() -> None:
    """No ``put`` (a node that cannot reach processes): the lane stops at the Write, its
    mirror written, for the long way to land it again and fail it."""
    mirror = memoryview(bytearray(LMR.view))
    lmr = Lmr(1, 1, LMR.region, "", mirror, 1, 11, pid=4242)
    write = encode(FrameType.WRITE, 1, WINDOW.address, KEY, payload_len=4) + b"land"
    buf = memoryview(write)
    assert lanes.lane(buf, 0, len(buf), {KEY: Reach(WINDOW, lmr).grant()}, 0, lambda: None,
                      WRITE, MAX_HEADER_LEN, None) == (0, 0)  # fmt: skip


def test_put_process_writes_into_a_process_and_answers_false_where_nothing_is_mapped() -> None:
    into = bytearray(16)
    address = ctypes.addressof(ctypes.c_char.from_buffer(into))
    source = memoryview(bytearray(b"0123456789"))
    assert lanes.put_process(os.getpid(), address + 3, source, 2, 5)
    assert into == b"\0\0\0" + b"23456" + bytes(8)
    assert not lanes.put_process(os.getpid(), 8, source, 0, 4), "page 0 is never mapped"
    for bad in [
        (0, address, source, 0, 1),
        (os.getpid(), address, source, 8, 4),
        (os.getpid(), address, b"bytes", 0, 1),
        (os.getpid(), -1, source, 0, 1),
    ]:
        with pytest.raises(TypeError):
            lanes.put_process(*bad)  # type: ignore[arg-type]


def test_the_lane_stops_at_a_header_length_outside_its_bounds() -> None:
    reach = {KEY: Reach(WINDOW, LMR).grant()}
    write = encode(FrameType.WRITE, 1, WINDOW.address, KEY, payload_len=4) + b"land"
    for head in [struct.pack(">I", 0), struct.pack(">I", MAX_HEADER_LEN + 1), b"\0\0"]:
        buf = memoryview(bytearray(write + head + b"\x94" * 8))
        assert lanes.lane(
            buf, 0, len(buf), reach, 0, lambda: None, WRITE, MAX_HEADER_LEN, None
        ) == (
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
        lanes.lane(memoryview(write), 0, len(write), {KEY: Reach(WINDOW, lmr).grant()}, 0,
                   before, WRITE, MAX_HEADER_LEN, None)  # fmt: skip
    assert memory == LMR.view


def test_a_grant_of_another_shape_lands_nothing() -> None:
    """A key's grant is a Grant tuple (Reach.grant); anything else under it (a Reach itself, a
    tuple of another length or of other items) is declined: the long way decides."""
    memory = memoryview(bytearray(LMR.view))
    lmr = Lmr(1, 1, LMR.region, "seg", memory, 1, 11)
    reach = Reach(WINDOW, lmr)
    good = reach.grant()
    write = memoryview(encode(FrameType.WRITE, 1, WINDOW.address, KEY, payload_len=4) + b"land")
    for grant in [reach, good[:4], (*good, 0), ("0", *good[1:]), (*good[:3], b"x" * 64, 0)]:
        grants: dict[int, Any] = {KEY: grant}
        got = lanes.lane(write, 0, len(write), grants, 0, lambda: None, WRITE, MAX_HEADER_LEN, None)
        assert got == (0, 0) and memory == LMR.view
    assert lanes.lane(write, 0, len(write), {KEY: good}, 0, lambda: None, WRITE, MAX_HEADER_LEN,
                      None) == (len(write), 1)  # fmt: skip


def test_the_lane_refuses_arguments_of_the_wrong_kind() -> None:
    buf = memoryview(bytearray(16))
    cases: list[tuple[Any, ...]] = [
        (bytearray(16), 0, 16, {}, 0),  # not a memoryview
        (buf, 0, 17, {}, 0),  # a range past the buffer
        (buf, 8, 4, {}, 0),  # a range that ends before it starts
        (buf, 0, 16, [], 0),  # grants not a dict
    ]
    lane: Callable[..., object] = lanes.lane
    for args in cases:
        with pytest.raises(TypeError):
            lane(*args, lambda: None, WRITE, MAX_HEADER_LEN, None)
    with pytest.raises(TypeError):
        lanes.lane(buf, "0", 16, {}, 0, lambda: None, WRITE, MAX_HEADER_LEN, None)  # type: ignore[arg-type]


def _acks_by_the_rules(
    view: memoryview, start: int, end: int, acked: int, limit: int
) -> tuple[int, int]:
    """fabricd/nic/lane.py's acks, frame by frame: ACKs without payload, each of a
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
        assert lanes.acks(buf, start, end, acked, limit, ACK, MAX_HEADER_LEN) == want
        taken += want[0] > start
    assert taken > 1000, "the draw reaches the common ACK often"


def test_the_ack_lane_refuses_arguments_of_the_wrong_kind() -> None:
    buf = memoryview(bytearray(16))
    acks: Callable[..., object] = lanes.acks
    for args in [(buf, 0, 17, 0, 1), (buf, 0, 16, -1, 1), (buf, 0, 16, 0, "1"), (b"", 0, 0, 0, 1)]:
        with pytest.raises(TypeError):
            acks(*args, ACK, MAX_HEADER_LEN)


READ_REQ = int(FrameType.READ_REQ)
READ_RESP = int(FrameType.READ_RESP)


def _u64(value: object) -> bool:
    return type(value) is int and 0 <= value < 1 << 64


def _read_resp_by_the_rules(
    view: memoryview, start: int, end: int, seq: int, room: int
) -> tuple[int, int]:
    """fabricd/nic/lane.py's rule for a Read's answer: a READ_RESP of ``seq``, whole, its
    payload no larger than the Read's buffer (``room``); where it ends and its size."""
    found = _header_at(view, start, end)
    if found is None:
        return start, 0
    frame, head = found
    size = frame.payload_len
    if frame.type is not FrameType.READ_RESP or not _u64(frame.fields[0]):
        return start, 0
    if frame.fields[0] != seq or head + size > end or size > room:
        return start, 0
    return head + size, size


def _read_resp_frame(rng: random.Random, seq: int, room: int) -> bytes:
    kind = rng.choices(["resp", "seq", "large", "ack", "str", "write"], [20, 2, 2, 1, 1, 1])[0]
    size = rng.randint(0, room)
    if kind == "seq":
        seq += rng.choice([-1, 1])
    elif kind == "large":
        size = room + rng.randint(1, 8)
    elif kind == "ack":
        return encode(FrameType.ACK, seq)
    elif kind == "write":
        return encode(FrameType.WRITE, seq, WINDOW.address, KEY, payload_len=1) + b"x"
    payload = rng.randbytes(size)
    if kind == "str":
        return encode(FrameType.READ_RESP, str(seq), payload_len=size) + payload
    return encode(FrameType.READ_RESP, seq, payload_len=size) + payload


def test_the_read_lane_lands_what_the_rule_lands_and_stops_where_it_stops() -> None:
    rng = random.Random(13)
    taken = 0
    for _ in range(2000):
        seq, room = rng.randrange(1, 1 << 40), rng.choice([1, 64, 4096])
        stream = _read_resp_frame(rng, seq, room) + _read_resp_frame(rng, seq + 1, room)
        stream = stream[: rng.choice([len(stream)] * 3 + [rng.randrange(len(stream) + 1)])]
        skip = rng.randint(0, 7)
        buf = memoryview(bytearray(rng.randbytes(skip)) + stream + bytearray(2))
        start, end = skip, skip + len(stream)
        sink = memoryview(bytearray(room))
        want = _read_resp_by_the_rules(buf, start, end, seq, room)
        assert lanes.read_resp(buf, start, end, seq, sink, READ_RESP, MAX_HEADER_LEN) == want
        stop, size = want
        if stop > start:
            assert bytes(sink[:size]) == bytes(buf[stop - size : stop])
            assert bytes(sink[size:]) == bytes(room - size), "nothing past the answer"
            taken += 1
        else:
            assert sink == bytes(room), "nothing landed"
    assert taken > 1000, "the draw reaches the common answer often"


def _request_by_the_rules(
    view: memoryview, start: int, end: int, ftype: int, count: int
) -> tuple[int, list[object] | None]:
    """The frame at the head when it is of ``ftype``, whole, without payload, its header
    ``count`` u64s: where it ends and the header."""
    found = _header_at(view, start, end)
    if found is None:
        return start, None
    frame, head = found
    header = [int(frame.type), frame.payload_len, *frame.fields]
    if frame.type != ftype or frame.payload_len or len(header) != count:
        return start, None
    if not all(_u64(value) for value in header):
        return start, None
    return head, header


def _read_req_frame(rng: random.Random) -> bytes:
    kind = rng.choices(["req", "float", "str", "neg", "ack", "resp"], [20, 2, 1, 1, 1, 1])[0]
    fields: list[object] = [rng.randrange(1 << 40), WINDOW.address, KEY, 64, rng.randrange(9)]
    if kind == "float":
        fields[1] = 2.5
    elif kind == "str":
        fields[3] = "64"
    elif kind == "neg":
        fields[4] = -1
    elif kind == "ack":
        return encode(FrameType.ACK, 3)
    elif kind == "resp":
        return encode(FrameType.READ_RESP, 3, payload_len=1) + b"x"
    return encode(FrameType.READ_REQ, *fields)


def test_the_read_request_lane_finds_what_the_rule_finds() -> None:
    rng = random.Random(14)
    found = 0
    for _ in range(2000):
        stream = b"".join(_read_req_frame(rng) for _ in range(rng.randint(1, 3)))
        stream = stream[: rng.choice([len(stream)] * 3 + [rng.randrange(len(stream) + 1)])]
        skip = rng.randint(0, 7)
        buf = memoryview(bytearray(rng.randbytes(skip)) + stream + bytearray(2))
        start, end = skip, skip + len(stream)
        want = _request_by_the_rules(buf, start, end, READ_REQ, 7)
        assert lanes.request(buf, start, end, READ_REQ, 7, MAX_HEADER_LEN) == want
        found += want[1] is not None
    assert found > 1000, "the draw reaches the common request often"


def test_the_read_lanes_refuse_arguments_of_the_wrong_kind() -> None:
    buf, sink = memoryview(bytearray(16)), memoryview(bytearray(8))
    read_resp: Callable[..., object] = lanes.read_resp
    request: Callable[..., object] = lanes.request
    for args in [(buf, 0, 17, 1, sink), (buf, 0, 16, -1, sink), (buf, 0, 16, 1, bytearray(8)),
                 (buf, 0, 16, 1, memoryview(b"readonly"))]:  # fmt: skip
        with pytest.raises(TypeError):
            read_resp(*args, READ_RESP, MAX_HEADER_LEN)
    for count in (1, 9, -1, "7"):
        with pytest.raises((TypeError, OverflowError)):
            request(buf, 0, 16, READ_REQ, count, MAX_HEADER_LEN)


SERVED = 0x10000  # where the served target's bytes start, as an address
SERVE_GRANTS: dict[int, tuple[int, int, int, memoryview, int]] = {}


def _serve_grants() -> dict[int, tuple[int, int, int, memoryview, int]]:
    """Grants (memory.Grant) of one target: a key over all of it, one over a part, one of a
    process's memory (pid 7: never served) and one whose range outruns its target."""
    if not SERVE_GRANTS:
        target = memoryview(bytearray(random.Random(15).randbytes(4096)))
        SERVE_GRANTS.update({
            1: (SERVED, SERVED + 4096, SERVED, target, 0),
            2: (SERVED + 1024, SERVED + 2048, SERVED, target, 0),
            3: (SERVED, SERVED + 4096, SERVED, target, 7),
            4: (SERVED, SERVED + 8192, SERVED, target, 0),
        })  # fmt: skip
    return SERVE_GRANTS


def _serve_by_the_rules(
    view: memoryview, start: int, end: int, seq: int, reads_in: int, max_in: int, most: int,
    grants: dict[int, tuple[int, int, int, memoryview, int]],
) -> tuple[int, bytes | None]:  # fmt: skip
    """Responder.serve's rule for the lane: the whole read one READ_REQ of ``seq``, within
    the credits (Responder._credited), of 1 to ``most`` bytes under a granted key of a
    segment, inside its range and its target: its READ_RESP, whole."""
    found = _request_by_the_rules(view, start, end, READ_REQ, 7)
    if found[1] is None or found[0] != end:
        return start, None
    _, _, rseq, address, key, length, reads_done = found[1]
    assert type(address) is int and type(length) is int and type(reads_done) is int
    if rseq != seq or not 0 < length <= most or reads_in + 1 - reads_done > max_in:
        return start, None
    if key not in grants:
        return start, None
    lo, hi, origin, target, pid = grants[key]
    if pid or not lo <= address <= address + length <= hi or hi - origin > len(target):
        return start, None
    at = address - origin
    return end, encode_framed(target[at : at + length], READ_RESP, seq)


def _serve_frame(rng: random.Random, seq: int, reads_in: int) -> bytes:
    kind = rng.choices(["req", "seq", "long", "zero", "key", "credit", "other"], [20] + [1] * 6)[0]
    key = rng.choice([1, 1, 1, 2, 3, 4])
    length = rng.choice([1, 8, 64, 256])
    address = SERVED + rng.randrange(0, 4096 + 512 if key == 4 else 4096 - length)
    reads_done = reads_in - rng.randint(0, 3)
    if kind == "seq":
        seq += rng.choice([-1, 1])
    elif kind == "long":
        length = rng.choice([4097, 1 << 20])
    elif kind == "zero":
        length = 0
    elif kind == "key":
        key = 99
    elif kind == "credit":
        reads_done = max(0, reads_in - rng.randint(4, 9))
    elif kind == "other":
        return encode(FrameType.ACK, seq)
    return encode(FrameType.READ_REQ, seq, address, key, length, reads_done)


def test_the_serving_read_lane_answers_what_the_rule_answers() -> None:
    rng = random.Random(16)
    grants, served = _serve_grants(), 0
    for _ in range(3000):
        seq, reads_in = rng.randrange(1, 1 << 40), rng.randrange(0, 1 << 20)
        stream = b"".join(_serve_frame(rng, seq, reads_in) for _ in range(rng.choice([1, 1, 2])))
        stream = stream[: rng.choice([len(stream)] * 3 + [rng.randrange(len(stream) + 1)])]
        skip = rng.randint(0, 7)
        buf = memoryview(bytearray(rng.randbytes(skip)) + stream + bytearray(2))
        start, end = skip, skip + len(stream)
        want = _serve_by_the_rules(buf, start, end, seq, reads_in, 4, 4096, grants)
        args = (buf, start, end, seq, reads_in, 4, 4096, grants, READ_REQ, READ_RESP)
        assert lanes.serve(*args, MAX_HEADER_LEN) == want
        served += want[1] is not None
    assert served > 500, "the draw reaches the common request often"


def test_the_serving_read_lane_declines_a_grant_of_another_shape() -> None:
    request = encode(FrameType.READ_REQ, 5, SERVED, 1, 64, 0)
    buf = memoryview(bytearray(request))
    target = memoryview(bytearray(4096))
    whole = (SERVED, SERVED + 4096, SERVED)
    shapes: list[object] = [
        (*whole, target),  # an item short
        (*whole, bytearray(4096), 0),  # not a memoryview
        (*whole, target[::2], 0),  # not contiguous
        [*whole, target, 0],  # a list
        (-1, 4096, 0, target, 0),  # not a u64
    ]
    for grant in shapes:
        got = lanes.serve(buf, 0, len(buf), 5, 0, 4, 4096, {1: grant}, READ_REQ, READ_RESP, 512)
        assert got == (0, None)


def test_the_serving_read_lane_refuses_arguments_of_the_wrong_kind() -> None:
    buf = memoryview(bytearray(16))
    serve: Callable[..., object] = lanes.serve
    wrong: list[tuple[object, ...]] = [
        (buf, 0, 17, 1, 0, 4, 64, {}),  # a range past the buffer
        (buf, 0, 16, -1, 0, 4, 64, {}),  # a negative sequence number
        (buf, 0, 16, 1, 0, 4, 64, []),  # grants not a dict
        (buf, 0, 16, 1, "0", 4, 64, {}),  # a count not an int
    ]
    for args in wrong:
        with pytest.raises(TypeError):
            serve(*args, READ_REQ, READ_RESP, MAX_HEADER_LEN)
    with pytest.raises(TypeError):
        serve(buf, 0, 16)
