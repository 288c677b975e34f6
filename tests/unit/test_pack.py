"""proto/_pack.c, the data path's frame headers packed by msgpack-c: byte for byte what
codec.encode makes of the same ints at every width msgpack has for them, read back as the
frame it was; anything but an int from 0 to 2**64 - 1, or too many items, is refused."""

from __future__ import annotations

import itertools

import pytest

from proto import _pack
from proto.codec import FrameReader, encode
from proto.frames import FrameType

EDGES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1]
"""Each end of each msgpack int form: fixint, uint8, uint16, uint32, uint64."""


@pytest.mark.parametrize("ftype", [FrameType.ACK, FrameType.WRITE, FrameType.READ_RESP])
def test_the_bytes_are_the_codecs(ftype: FrameType) -> None:
    for count in range(7):
        for fields in itertools.islice(itertools.product(EDGES, repeat=count), 300):
            for payload_len in (0, 64, 2**32):
                assert _pack.ints(ftype, payload_len, *fields) == encode(
                    ftype, *fields, payload_len=payload_len
                )


def test_a_whole_frame_is_its_header_and_its_payload() -> None:
    """framed: the header ints packs with the payload's length second, then the payload's
    bytes (from any contiguous buffer)."""
    for payload in (b"", b"x", bytes(range(256)) * 64):
        for fields in ([], [0], [7, 2**40, 3], list(EDGES[:5])):
            want = encode(FrameType.WRITE, *fields, payload_len=len(payload)) + payload
            assert _pack.framed(payload, FrameType.WRITE, *fields) == want
            assert _pack.framed(memoryview(bytearray(payload)), FrameType.WRITE, *fields) == want


def test_a_reader_decodes_what_it_packed() -> None:
    reader = FrameReader(lambda frame: None)
    data = _pack.ints(FrameType.READ_REQ, 0, 7, 2**40, 3, 4096, 1)
    reader.get_buffer(len(data))[: len(data)] = data
    reader.buffer_updated(len(data))
    frame = reader.next_event()
    assert frame is not None and frame.type == FrameType.READ_REQ
    assert frame.fields == [7, 2**40, 3, 4096, 1] and frame.payload_len == 0


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((), TypeError),
        ((FrameType.ACK,), TypeError),
        ((FrameType.ACK, 0, *range(7)), TypeError),  # 9 items: past the longest header
        ((FrameType.ACK, 0, "1"), TypeError),
        ((FrameType.ACK, 0, 1.0), TypeError),
        ((FrameType.ACK, 0, None), TypeError),
        ((FrameType.ACK, 0, -1), OverflowError),
        ((FrameType.ACK, 2**64, 1), OverflowError),
    ],
)
def test_anything_but_u64s_is_refused(args: tuple[object, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        _pack.ints(*args)  # type: ignore[arg-type]
    if len(args) >= 2 and args[1] == 0:  # the same fields after a payload (its length for 0)
        with pytest.raises(error):
            _pack.framed(b"pay", args[0], *args[2:])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args", [(), (b"pay",), ("pay", FrameType.WRITE), (b"pay", FrameType.WRITE, *range(7))]
)
def test_a_frame_without_a_buffer_or_a_type_or_with_too_many_items_is_refused(
    args: tuple[object, ...],
) -> None:
    with pytest.raises(TypeError):
        _pack.framed(*args)  # type: ignore[arg-type]
