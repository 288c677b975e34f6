"""proto.codec: framing round trips, any chunking, payload sinks, and garbage input.

DESIGN.md section 8, layer 2. The reader is driven two ways: ``feed()`` (bytes copied in) and the
asyncio.BufferedProtocol contract (``get_buffer()`` / ``buffer_updated()``), draining
``next_event()`` until None after every chunk, as the daemon's protocol does.
"""

from __future__ import annotations

import itertools
import random
import struct
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgpack
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fabricd.streams import READ_AHEAD
from proto.batch import MAX_BATCH_BYTES, encode_writes
from proto.codec import (
    DIRECT_LANDING_MIN,
    DISCARD,
    PEEK,
    PEEK_AFTER,
    Frame,
    FrameReader,
    Sink,
    encode,
    encode_frame,
    hello,
)
from proto.errors import DatError, FrameTooLarge, MalformedFrame, ProtocolError
from proto.frames import (
    FIELDS,
    MAX_HEADER_LEN,
    MAX_PAYLOAD_LEN,
    MAX_PROTOCOL_VERSION,
    MIN_PROTOCOL_VERSION,
    ROLE_CONSUMER,
    ROLE_PEER,
    FrameType,
)

Mode = Literal["feed", "buffer"]
MODES: tuple[Mode, ...] = ("feed", "buffer")
BUFSIZE = 256 * 1024  # FrameReader's default buffer size


# --- helpers -----------------------------------------------------------------------------------


@dataclass
class Spec:
    """One frame to encode: type, header fields, payload."""

    type: FrameType
    fields: list[Any]
    payload: bytes = b""

    def encode(self) -> bytes:
        return encode_frame(self.type, *self.fields, payload=self.payload)


def prefix(header: bytes) -> bytes:
    """A raw header body behind its 4-byte big-endian length."""
    return struct.pack(">I", len(header)) + header


def raw_header(obj: Any) -> bytes:
    """Length prefix + msgpack of ``obj``: lets a test build headers encode() would refuse."""
    return prefix(msgpack.packb(obj, use_bin_type=True))


def drain(reader: FrameReader) -> list[Frame]:
    """next_event() until it says more bytes are needed."""
    out: list[Frame] = []
    while (frame := reader.next_event()) is not None:
        out.append(frame)
    return out


def push(reader: FrameReader, chunk: bytes, mode: Mode) -> list[Frame]:
    """Give ``chunk`` to the reader and drain it.

    ``feed``: one feed() call, then drain. ``buffer``: the BufferedProtocol contract; each write
    fills at most what get_buffer returned (possibly less) and is followed by a drain, as
    asyncio's buffer_updated -> protocol -> next_event loop does.
    """
    out: list[Frame] = []
    if mode == "feed":
        reader.feed(chunk)
        return drain(reader)
    rest = memoryview(chunk)
    while rest:
        buf = reader.get_buffer(-1)
        assert len(buf) > 0, "get_buffer returned an empty buffer"
        n = min(len(buf), len(rest))
        buf[:n] = rest[:n]
        reader.buffer_updated(n)
        out.extend(drain(reader))
        rest = rest[n:]
    return out


def chunked(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """Split ``data`` at the given offsets (any order, duplicates and ends ignored)."""
    points = sorted({c for c in cuts if 0 < c < len(data)})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def decode_all(
    data: bytes,
    mode: Mode,
    cuts: Sequence[int] = (),
    sink_for: Callable[[Frame], Sink] | None = None,
) -> list[Frame]:
    reader = FrameReader() if sink_for is None else FrameReader(sink_for)
    out: list[Frame] = []
    for chunk in chunked(data, cuts):
        out.extend(push(reader, chunk, mode))
    assert reader.next_event() is None
    return out


def assert_frames(got: list[Frame], want: Sequence[Spec]) -> None:
    """Collected frames: same types, fields, payload lengths and payload bytes, in order."""
    assert [(f.type, f.fields, f.payload_len) for f in got] == [
        (s.type, s.fields, len(s.payload)) for s in want
    ]
    for f, s in zip(got, want, strict=True):
        if s.payload:
            assert f.payload == s.payload
        else:
            assert f.payload in (None, b"")


def payload_bytes(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


SAMPLE_FIELDS: dict[str, Any] = {
    "min_version": 1,
    "max_version": 1,
    "role": "peer",
    "name": "node-a",
    "reason": "bad frame",
    "req_id": 7,
    "method": "ep_create",
    "args": [1, "x", b"\x00\xff", None, {"k": [1, 2]}],
    "code": 0x80070033,
    "message": "not valid",
    "result": {"handle": 3, "attr": [1.5, True, False]},
    "evds": [2, 5],
    "ep": 4,
    "cookie": 2**64 - 1,
    "flags": 0,
    "local_iov": [[1, 0, 4096], [2, 4096, 100]],
    "remote": [0xDEAD0000, 64, 17],
    "conn_qual": 1234,
    "private_data": b"hello\x00",
    "rdma_read_in": 4,
    "rdma_read_out": 8,
    "by_peer": True,
    "seq": 2**40,
    "address": 0xFFFF_FFFF_FFFF_0000,
    "rmr_context": 99,
    "length": 1 << 20,
    "reads_done": 3,
    "status": -3,
    "ops": [[0xDEAD0000, 17, 64], [0xDEAD0040, 17, 0]],
    "lengths": [64, 0, 4096],
    "nonce": bytes(range(16)),
    "ia": "123-abcd0123",
    "segment": "datfabric-123-abcd0123-wq7",
    "size": 7_868_416,
    "proof": b"\x5a" * 32,
    "opcode": 5,
    "operand": 2**64 - 1,
    "compare": 0x12345,
    "original": 2**63,
    "immediate": 0x7777,
}


def sample_spec(ftype: FrameType, payload: bytes = b"") -> Spec:
    return Spec(ftype, [SAMPLE_FIELDS[name] for name in FIELDS[ftype]], payload)


# --- hypothesis strategies ---------------------------------------------------------------------

msgpack_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=16)
    | st.binary(max_size=16)
)
msgpack_values = st.recursive(
    msgpack_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def specs(draw: st.DrawFn, big_payloads: bool = True) -> Spec:
    ftype = draw(st.sampled_from(FrameType))
    fields = [draw(msgpack_values) for _ in FIELDS[ftype]]
    sizes = st.integers(0, 300)
    if big_payloads:
        sizes = sizes | st.integers(DIRECT_LANDING_MIN, DIRECT_LANDING_MIN + 12_000)
    size = draw(sizes)
    return Spec(ftype, fields, payload_bytes(draw(st.integers(0, 2**32)), size))


# --- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ftype", list(FrameType), ids=lambda t: t.name)
def test_round_trip_every_frame_type(ftype: FrameType, mode: Mode) -> None:
    for payload in (b"", b"\x00payload\xff"):
        spec = sample_spec(ftype, payload)
        assert_frames(decode_all(spec.encode(), mode), [spec])


def test_every_frame_type_has_a_field_layout() -> None:
    assert set(FIELDS) == set(FrameType)


@pytest.mark.parametrize("mode", MODES)
def test_frames_back_to_back_in_one_chunk_come_out_in_order(mode: Mode) -> None:
    specs_ = [
        sample_spec(FrameType.HELLO),
        sample_spec(FrameType.SEND, b"abc"),
        sample_spec(FrameType.HEARTBEAT),
        sample_spec(FrameType.WRITE, payload_bytes(1, 5000)),
        sample_spec(FrameType.ACK),
        sample_spec(FrameType.READ_RESP, payload_bytes(2, DIRECT_LANDING_MIN + 1)),
        sample_spec(FrameType.CONN_RTU),
    ]
    stream = b"".join(s.encode() for s in specs_)
    reader = FrameReader()
    got = push(reader, stream, mode)
    assert_frames(got, specs_)
    assert reader.next_event() is None


@pytest.mark.parametrize("mode", MODES)
def test_byte_at_a_time(mode: Mode) -> None:
    specs_ = [
        sample_spec(FrameType.CALL),
        sample_spec(FrameType.WRITE, b"0123456789"),
        sample_spec(FrameType.DISCONNECT),
    ]
    stream = b"".join(s.encode() for s in specs_)
    reader = FrameReader()
    got: list[Frame] = []
    for i in range(len(stream)):
        got.extend(push(reader, stream[i : i + 1], mode))
        if i < len(stream) - 1:
            assert len(got) < len(specs_)
    assert_frames(got, specs_)


@given(spec=specs(big_payloads=False))
@settings(max_examples=200, deadline=None)
def test_round_trip_random_fields(spec: Spec) -> None:
    assert_frames(decode_all(spec.encode(), "feed"), [spec])


def test_encode_frame_is_header_then_payload() -> None:
    payload = b"xyz" * 10
    data = encode_frame(FrameType.WRITE, 1, 2, 3, payload=payload)
    assert data == encode(FrameType.WRITE, 1, 2, 3, payload_len=len(payload)) + payload
    (hlen,) = struct.unpack_from(">I", data)
    header = msgpack.unpackb(data[4 : 4 + hlen], raw=False)
    assert header == [FrameType.WRITE, len(payload), 1, 2, 3]
    assert data[4 + hlen :] == payload


@pytest.mark.parametrize("role", [ROLE_CONSUMER, ROLE_PEER])
def test_hello(role: str) -> None:
    (frame,) = decode_all(hello(role, "node-7"), "feed")
    assert frame.type is FrameType.HELLO
    assert frame.fields == [MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION, role, "node-7"]
    assert dict(zip(FIELDS[FrameType.HELLO], frame.fields, strict=True)) == {
        "min_version": MIN_PROTOCOL_VERSION,
        "max_version": MAX_PROTOCOL_VERSION,
        "role": role,
        "name": "node-7",
    }
    assert frame.payload_len == 0


# --- any chunking decodes to the same frames ---------------------------------------------------


def _segment_sinks(record: list[list[bytearray]]) -> Callable[[Frame], Sink]:
    """A sink_for giving each payload three segments (plus an empty one) and recording them."""

    def sink_for(frame: Frame) -> Sink:
        n = frame.payload_len
        parts = [bytearray(0), bytearray(n // 3), bytearray(n // 3), bytearray(n - 2 * (n // 3))]
        record.append(parts)
        return [memoryview(p) for p in parts]

    return sink_for


@given(
    frames=st.lists(specs(), min_size=1, max_size=4),
    cut_fracs=st.lists(st.floats(0, 1), min_size=1, max_size=30),
    mode=st.sampled_from(MODES),
    sink=st.sampled_from(["collect", "segments"]),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_chunking_decodes_to_the_same_frames(
    frames: list[Spec], cut_fracs: list[float], mode: Mode, sink: str
) -> None:
    stream = b"".join(s.encode() for s in frames)
    # feed() copies a whole chunk before anything is decoded: keep each under the buffer size
    assert len(stream) < BUFSIZE - 64 * 1024
    cuts = [int(f * len(stream)) for f in cut_fracs]
    event(f"{len(chunked(stream, cuts))} chunks")
    if sink == "collect":
        got = decode_all(stream, mode, cuts)
        assert_frames(got, frames)
        return
    record: list[list[bytearray]] = []
    got = decode_all(stream, mode, cuts, _segment_sinks(record))
    assert [(f.type, f.fields, f.payload_len) for f in got] == [
        (s.type, s.fields, len(s.payload)) for s in frames
    ]
    with_payload = [s for s in frames if s.payload]
    assert len(record) == len(with_payload)  # sink_for: once per header with a payload
    for parts, s in zip(record, with_payload, strict=True):
        assert b"".join(parts) == s.payload
    for f in got:
        if f.payload_len:
            assert f.payload is None


@given(
    frames=st.lists(specs(), min_size=1, max_size=4),
    cut_fracs=st.lists(st.floats(0, 1), min_size=1, max_size=30),
)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_chunking_with_a_small_reader_buffer(
    frames: list[Spec], cut_fracs: list[float]
) -> None:
    """A buffer barely larger than the largest header: compaction happens all the time."""
    stream = b"".join(s.encode() for s in frames)
    cuts = [int(f * len(stream)) for f in cut_fracs]
    reader = FrameReader(max_header=8192, bufsize=0)
    got: list[Frame] = []
    for chunk in chunked(stream, cuts):
        got.extend(push(reader, chunk, "buffer"))
    assert_frames(got, frames)
    assert reader.next_event() is None


@pytest.mark.parametrize("partial", [0, 1, 5000])
def test_large_payload_lands_directly_in_the_sink(partial: int) -> None:
    """While at least DIRECT_LANDING_MIN bytes of a sink's segment are still to come,
    get_buffer hands out that segment's own memory (zero-copy landing); a smaller segment, and
    a segment's tail, go via the buffer."""
    first = DIRECT_LANDING_MIN // 2
    size = first + 2 * DIRECT_LANDING_MIN
    payload = payload_bytes(3, size)
    data = encode_frame(FrameType.WRITE, 1, 2, 3, payload=payload)
    hlen = len(data) - size
    segs = [bytearray(first), bytearray(size - first)]
    reader = FrameReader(lambda f: [memoryview(s) for s in segs])
    assert push(reader, data[: hlen + partial], "buffer") == []
    landed: list[int] = []
    expected: list[int] = []
    done = partial
    frames: list[Frame] = []
    while done < size:
        buf = reader.get_buffer(-1)
        landed.append(next((i for i, s in enumerate(segs) if buf.obj is s), -1))
        remaining = size - done
        expected.append(1 if done >= first and remaining >= DIRECT_LANDING_MIN else -1)
        if landed[-1] >= 0:  # never more than the segment, never past the payload
            assert len(buf) == min(remaining, (first if done < first else size) - done)
        n = min(len(buf), remaining, 7000)  # fewer bytes than offered
        buf[:n] = data[hlen + done : hlen + done + n]
        reader.buffer_updated(n)
        # ``landing``: the stream's shell skips frame handling for these reads
        assert reader.landing == (landed[-1] >= 0 and done + n < size)
        frames.extend(drain(reader))
        done += n
    assert not reader.landing
    assert landed == expected
    assert 0 not in landed and 1 in landed and -1 in landed
    assert len(frames) == 1 and frames[0].payload is None
    assert bytes(segs[0]) + bytes(segs[1]) == payload


def test_a_batch_of_small_segments_comes_through_the_buffer_many_in_one_read() -> None:
    """A WRITES batch of 4 KiB Writes (a sink segment each, 112 KiB in all), its header read
    first: no read lands in a segment, one read brings the rest, and each gets its bytes."""
    count, each = 28, 4096
    payload = payload_bytes(7, count * each)
    data = encode_frame(FrameType.WRITE, 1, 2, 3, payload=payload)
    segs = [bytearray(each) for _ in range(count)]
    reader = FrameReader(lambda f: [memoryview(s) for s in segs], bufsize=256 * 1024)
    at = len(data) - len(payload) + 100
    assert push(reader, data[:at], "buffer") == []
    reads, frames = 0, list[Frame]()
    while at < len(data):
        buf = reader.get_buffer(-1)
        assert not any(buf.obj is s for s in segs), "a small segment is never read into"
        n = min(len(buf), len(data) - at)
        buf[:n] = data[at : at + n]
        reader.buffer_updated(n)
        frames.extend(drain(reader))
        at, reads = at + n, reads + 1
    assert reads == 1 and len(frames) == 1
    assert b"".join(segs) == payload


@pytest.mark.parametrize(("size", "peeks"), [(PEEK_AFTER, True), (PEEK_AFTER - 1, False)])
def test_after_a_huge_payload_the_next_read_is_a_peek(size: int, peeks: bool) -> None:
    """The read after a payload of PEEK_AFTER bytes is offered PEEK bytes (the next header
    brings little of its payload through the buffer); the reads after it are offered the whole
    room again, and the frames decode the same."""
    payload = payload_bytes(6, size)
    sink = bytearray(size)
    reader = FrameReader(lambda f: [memoryview(sink)])
    got = push(reader, encode_frame(FrameType.WRITE, 1, 2, 3, payload=payload), "buffer")
    assert len(got) == 1 and bytes(sink) == payload
    acks = b"".join(encode_frame(FrameType.ACK, seq) for seq in range(40_000))
    buf = reader.get_buffer(-1)
    assert (len(buf) == PEEK) == peeks, len(buf)
    buf[:] = acks[: len(buf)]  # a full read
    reader.buffer_updated(len(buf))
    frames = drain(reader)
    assert len(reader.get_buffer(-1)) > PEEK
    frames += push(reader, acks[len(buf) :], "buffer")
    assert [f.fields for f in frames] == [[seq] for seq in range(40_000)]


def test_large_collected_payload_gets_a_payload_sized_buffer() -> None:
    """Without a sink, a large payload is still landed directly: get_buffer offers exactly the
    bytes still to come, so the next frame's bytes never mix into it."""
    size = DIRECT_LANDING_MIN * 2
    payload = payload_bytes(4, size)
    data = encode_frame(FrameType.SEND, 5, payload=payload)
    hlen = len(data) - size
    reader = FrameReader()
    assert push(reader, data[: hlen + 100], "buffer") == []
    buf = reader.get_buffer(-1)
    assert len(buf) == size - 100
    buf[:] = payload[100:]
    reader.buffer_updated(size - 100)
    (frame,) = drain(reader)
    assert frame.payload == payload


@pytest.mark.timeout(30)  # an empty buffer inside feed() would make it spin forever
def test_feed_accepts_a_chunk_larger_than_the_buffer() -> None:
    spec = sample_spec(FrameType.SEND, payload_bytes(5, BUFSIZE + 1000))
    reader = FrameReader()
    reader.feed(spec.encode())
    assert_frames(drain(reader), [spec])


# --- sinks -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [10, 999, DIRECT_LANDING_MIN + 3])
def test_segment_sink_receives_payload_in_order(size: int, mode: Mode) -> None:
    payload = payload_bytes(size, size)
    parts = [bytearray(3), bytearray(0), bytearray(size // 2), bytearray(size - 3 - size // 2)]
    seen: list[Frame] = []

    def sink_for(frame: Frame) -> Sink:
        seen.append(frame)
        assert frame.payload_len == size and frame.fields == [11]
        return [memoryview(p) for p in parts]

    stream = (
        encode_frame(FrameType.HEARTBEAT)
        + encode_frame(FrameType.SEND, 11, payload=payload)
        + encode_frame(FrameType.ACK, 12)
    )
    got = decode_all(stream, mode, [len(stream) // 3, len(stream) // 2], sink_for)
    assert [f.type for f in got] == [FrameType.HEARTBEAT, FrameType.SEND, FrameType.ACK]
    assert len(seen) == 1  # not called for frames without payload
    assert got[1].payload is None and got[1].payload_len == size
    assert b"".join(parts) == payload
    assert got[2].fields == [12]


def _decode_with(sink_for: Callable[[Frame], Sink], stream: bytes, mode: Mode) -> list[Frame]:
    reader = FrameReader(sink_for)
    return push(reader, stream, mode)


def test_sink_of_non_byte_memoryviews_is_filled_bytewise() -> None:
    payload = bytes(range(16))
    words = array("H", [0] * 8)
    stream = encode_frame(FrameType.SEND, 1, payload=payload)
    got = _decode_with(lambda f: [memoryview(words)], stream, "feed")
    assert len(got) == 1 and got[0].payload is None
    assert words.tobytes() == payload


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 500, DIRECT_LANDING_MIN + 7])
def test_discard_skips_payload(size: int, mode: Mode) -> None:
    stream = (
        encode_frame(FrameType.WRITE, 1, 2, 3, payload=payload_bytes(6, size))
        + encode_frame(FrameType.NAK, 4, 5)
        + encode_frame(FrameType.SEND, 6, payload=b"kept")
    )
    reader = FrameReader(lambda f: DISCARD if f.type is FrameType.WRITE else None)
    got: list[Frame] = []
    for chunk in chunked(stream, [7, len(stream) // 2]):
        got.extend(push(reader, chunk, mode))
    assert [(f.type, f.fields) for f in got] == [
        (FrameType.WRITE, [1, 2, 3]),
        (FrameType.NAK, [4, 5]),
        (FrameType.SEND, [6]),
    ]
    assert got[0].payload is None and got[0].payload_len == size
    assert got[2].payload == b"kept"


@pytest.mark.parametrize("sizes", [[5], [6, 3], [10, 1], [0]], ids=str)
def test_sink_with_wrong_total_raises(sizes: list[int]) -> None:
    stream = encode_frame(FrameType.SEND, 1, payload=b"0123456789")  # 10 bytes

    def sink_for(frame: Frame) -> Sink:
        return [memoryview(bytearray(n)) for n in sizes]

    reader = FrameReader(sink_for)
    reader.feed(stream)
    with pytest.raises(ValueError, match="sink"):
        reader.next_event()


# --- garbage -----------------------------------------------------------------------------------


def _garbage_reader() -> FrameReader:
    # a small max_payload so a random header cannot make the reader allocate a GiB
    return FrameReader(max_payload=1 << 16)


def _swallow(data: bytes, chunk: int) -> None:
    """Feed ``data`` in chunks; only ProtocolError may escape."""
    reader = _garbage_reader()
    try:
        for i in range(0, len(data), chunk):
            reader.feed(data[i : i + chunk])
            for frame in drain(reader):
                assert isinstance(frame.type, FrameType)
                assert len(frame.fields) == len(FIELDS[frame.type])
    except ProtocolError as err:
        event(type(err).__name__)
        assert not isinstance(err, DatError)


valid_prefix = st.lists(specs(big_payloads=False), max_size=2).map(
    lambda fs: b"".join(s.encode() for s in fs)
)
garbage = st.one_of(
    st.binary(max_size=600),
    # a plausible length prefix in front of random header bytes
    st.binary(max_size=300).map(prefix),
    # msgpack headers of any shape (wrong types, counts, lengths) + random trailing bytes
    st.tuples(st.lists(msgpack_values, max_size=6), st.binary(max_size=200)).map(
        lambda t: raw_header(t[0]) + t[1]
    ),
    # plausible [type, plen, ...] headers with random field counts and payload lengths
    st.tuples(
        st.sampled_from([*FrameType, 0, 3, 0x7F, 0xFF, -1]),
        st.integers(-5, 1 << 17),
        st.lists(msgpack_values, max_size=6),
        st.binary(max_size=200),
    ).map(lambda t: raw_header([t[0], t[1], *t[2]]) + t[3]),
)


@given(head=valid_prefix, junk=garbage, chunk=st.integers(1, 700))
@settings(max_examples=400, deadline=None)
def test_random_bytes_raise_only_protocol_errors(head: bytes, junk: bytes, chunk: int) -> None:
    _swallow(head + junk, chunk)


@given(
    spec=specs(big_payloads=False),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
)
@settings(max_examples=200, deadline=None)
def test_corrupted_frames_raise_only_protocol_errors(
    spec: Spec, flips: list[tuple[int, int]]
) -> None:
    data = bytearray(spec.encode())
    for pos, mask in flips:
        data[pos % len(data)] ^= mask
    _swallow(bytes(data), 64)


def _error_of(data: bytes, reader: FrameReader | None = None) -> ProtocolError:
    reader = reader or FrameReader()
    reader.feed(data)
    with pytest.raises(ProtocolError) as info:
        drain(reader)
    return info.value


def test_zero_header_length() -> None:
    assert isinstance(_error_of(b"\x00\x00\x00\x00"), FrameTooLarge)


def test_header_length_above_limit() -> None:
    # refused from the 4-byte prefix alone, before the header body arrives
    assert isinstance(_error_of(struct.pack(">I", MAX_HEADER_LEN + 1)), FrameTooLarge)
    assert isinstance(_error_of(b"\xff\xff\xff\xff"), FrameTooLarge)
    reader = FrameReader(max_header=100)
    assert isinstance(_error_of(struct.pack(">I", 101), reader), FrameTooLarge)


def test_header_length_at_limit_waits_for_more() -> None:
    reader = FrameReader()
    reader.feed(struct.pack(">I", MAX_HEADER_LEN) + b"\x90" * 10)
    assert reader.next_event() is None
    small = FrameReader(max_header=100)
    small.feed(struct.pack(">I", 100))
    assert small.next_event() is None


def test_payload_length_above_reader_limit() -> None:
    reader = FrameReader(max_payload=1000)
    err = _error_of(encode(FrameType.SEND, 1, payload_len=1001), reader)
    assert isinstance(err, FrameTooLarge)
    huge = encode(FrameType.SEND, 1, payload_len=MAX_PAYLOAD_LEN + 1)
    assert isinstance(_error_of(huge), FrameTooLarge)
    ok = FrameReader(max_payload=1000)
    ok.feed(encode(FrameType.SEND, 1, payload_len=1000) + bytes(1000))
    (frame,) = drain(ok)
    assert frame.payload == bytes(1000)


def test_negative_payload_length() -> None:
    assert isinstance(_error_of(raw_header([FrameType.SEND, -1, 1])), ProtocolError)


@pytest.mark.parametrize(
    "body",
    [b"\xc1", b"\x93\x01", b"\x92\x01\x00\x00", b"\xdd\xff\xff\xff\xff"],
    ids=["never-used-byte", "truncated-array", "extra-data", "huge-array-claim"],
)
def test_non_msgpack_header(body: bytes) -> None:
    assert isinstance(_error_of(prefix(body)), MalformedFrame)


@pytest.mark.parametrize(
    "obj",
    [5, "HELLO", {"type": 1, "payload_len": 0}, b"\x01\x00", None, [], [FrameType.HEARTBEAT]],
    ids=["int", "str", "map", "bin", "nil", "empty-array", "one-element"],
)
def test_header_not_an_array_of_type_and_length(obj: Any) -> None:
    assert isinstance(_error_of(raw_header(obj)), MalformedFrame)


@pytest.mark.parametrize(
    "header",
    [["x", 0], [1.0, 0], [True, 0], [FrameType.HEARTBEAT, "0"], [FrameType.HEARTBEAT, None]],
    ids=["str-type", "float-type", "bool-type", "str-len", "nil-len"],
)
def test_type_and_length_must_be_integers(header: list[Any]) -> None:
    assert isinstance(_error_of(raw_header(header)), MalformedFrame)


@pytest.mark.parametrize("value", [0, 3, 0x3F, 0x7F, 0x9F, 0xFF, -1, 2**40])
def test_unknown_frame_type(value: int) -> None:
    assert value not in set(FrameType)
    assert isinstance(_error_of(raw_header([value, 0])), MalformedFrame)


WRONG_ARITY = [
    pytest.param(t, n, id=f"{t.name}-{n}")
    for t in FrameType
    for n in (len(FIELDS[t]) - 1, len(FIELDS[t]) + 1, len(FIELDS[t]) + 3)
    if n >= 0
]


@pytest.mark.parametrize(("ftype", "count"), WRONG_ARITY)
def test_wrong_field_count(ftype: FrameType, count: int) -> None:
    data = encode(ftype, *range(count))
    assert isinstance(_error_of(data), MalformedFrame)


def test_protocol_errors_are_not_dat_errors() -> None:
    for cls in (FrameTooLarge, MalformedFrame):
        assert issubclass(cls, ProtocolError)
        assert not issubclass(cls, DatError)


@pytest.mark.parametrize(("grows_to", "reads"), [(READ_AHEAD, 1), (256 * 1024, 2)])
def test_a_whole_batch_of_small_writes_lands_from_one_read(grows_to: int, reads: int) -> None:
    """A stream's reader (fabricd.streams.READ_AHEAD) grows until a full WRITES batch of 4 KiB
    Writes (MAX_BATCH_BYTES and its header), alone on the socket as a window of them is, comes
    in one read; one of 256 KiB, as it was, leaves the header's worth for a second read."""
    count = MAX_BATCH_BYTES // 4096
    payload = payload_bytes(3, MAX_BATCH_BYTES)
    data = encode_writes(7, [(64 * i, 9, 4096) for i in range(count)]) + payload
    segs = [bytearray(4096) for _ in range(count)]
    reader = FrameReader(lambda f: [memoryview(s) for s in segs], max_bufsize=grows_to)
    per_window = []
    for _ in range(4):  # each window's batch alone on the socket
        at, n_reads, frames = 0, 0, list[Frame]()
        while at < len(data):
            buf = reader.get_buffer(-1)
            n = min(len(buf), len(data) - at)
            buf[:n] = data[at : at + n]
            reader.buffer_updated(n)
            frames.extend(drain(reader))
            at, n_reads = at + n, n_reads + 1
        assert len(frames) == 1 and b"".join(segs) == payload
        per_window.append(n_reads)
    assert per_window[-1] == reads


def test_a_lane_takes_whole_frames_at_the_head_and_the_reader_decodes_what_it_left() -> None:
    """FrameReader.head and took: a lane sees the buffered bytes and consumes the first frame
    (it says where it stopped, a boundary); the reader decodes the second as before; while a
    payload is in progress, or with nothing buffered, the head is empty."""
    first = encode_frame(FrameType.WRITE, 1, 2, 3, payload=b"abcd")
    second = encode_frame(FrameType.ACK, 7)
    reader = FrameReader()
    start, end = reader.head()
    assert start == end  # nothing buffered
    reader.feed(first + second)
    start, end = reader.head()
    assert bytes(reader.view[start:end]) == first + second
    reader.took(start + len(first))
    frame = reader.next_event()
    assert frame is not None and (frame.type, frame.fields) == (FrameType.ACK, [7])
    assert reader.next_event() is None and reader.pending == 0
    start, end = reader.head()
    assert start == end and reader.drained  # all taken: the buffer starts again
    reader.feed(first[:-2])  # a payload in progress
    assert reader.next_event() is None
    start, end = reader.head()
    assert start == end


def test_a_payload_landed_in_its_place_leaves_its_frame_to_handle() -> None:
    """A payload of DIRECT_LANDING_MIN bytes or more is read straight into its place, and the
    read that completes it ends with it: nothing is pending then, but the reader is not
    ``drained`` until next_event has returned that frame."""
    size = 2 * DIRECT_LANDING_MIN
    place = bytearray(size)
    reader = FrameReader(lambda frame: [memoryview(place)])
    stream = encode_frame(FrameType.WRITE, 1, 2, 3, payload=b"\x09" * size)
    reader.feed(stream[:64])
    assert reader.next_event() is None and not reader.drained
    rest = memoryview(stream)[64:]
    buf = reader.get_buffer(len(rest))
    assert len(buf) == len(rest), "the payload's remaining bytes, in place"
    buf[:] = rest
    reader.buffer_updated(len(rest))
    assert reader.pending == 0 and not reader.landing and not reader.drained
    frame = reader.next_event()
    assert frame is not None and frame.fields == [1, 2, 3] and place == b"\x09" * size
    assert reader.drained


def test_a_lane_that_stops_outside_the_buffered_bytes_is_refused() -> None:
    reader = FrameReader()
    reader.feed(encode_frame(FrameType.ACK, 7))
    start, end = reader.head()
    for stop in (start - 1, end + 1):
        with pytest.raises(ValueError, match="outside"):
            reader.took(stop)
    frame = reader.next_event()
    assert frame is not None and frame.type == FrameType.ACK, "the reader's place is kept"
