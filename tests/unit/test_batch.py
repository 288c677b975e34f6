"""Batched frames' headers (proto/batch.py): a WRITES or SENDS header from the wire is checked
once (the target's sink and its handler both parse it) and a malformed one is a protocol
error, whatever its shape."""

from __future__ import annotations

from typing import Any

import pytest

from proto.batch import encode_sends, encode_writes, parse_sends, parse_writes
from proto.codec import Frame, decode_header
from proto.errors import MalformedFrame


def _decoded(header: bytes) -> Frame:
    """The frame a reader makes of ``header`` (after its 4-byte length)."""
    return decode_header(header[4:])


def test_a_sends_header_is_checked_once_then_its_lengths_are_taken_as_they_are() -> None:
    frame = _decoded(encode_sends(7, [16, 0, 64]))
    assert parse_sends(frame) == (7, [16, 0, 64])
    assert frame.fields[1] == (16, 0, 64), "parsed: the checked lengths replace the raw list"
    frame.payload_len = 1  # checked again, the lengths would not add up
    assert parse_sends(frame) == (7, (16, 0, 64))


def test_a_writes_header_is_checked_once_too() -> None:
    frame = _decoded(encode_writes(3, [(4096, 9, 16), (4112, 9, 8)]))
    assert parse_writes(frame) == (3, [(4096, 9, 16), (4112, 9, 8)])
    assert type(frame.fields[1]) is tuple
    frame.payload_len = 1
    assert parse_writes(frame) == (3, [(4096, 9, 16), (4112, 9, 8)])


@pytest.mark.parametrize(
    "fields, payload_len",
    [
        ([1, [16, "16"]], 32),  # a length that is not an integer
        ([1, [16, -16]], 0),  # a negative one
        ([1, [16, 16]], 31),  # lengths that do not add up to the payload
        ([1, []], 0),  # no Sends
        ([0, [16]], 16),  # no sequence number
        ([1, 16], 16),  # not a list
    ],
)
def test_a_malformed_sends_header_is_a_protocol_error(fields: list[Any], payload_len: int) -> None:
    frame = _decoded(encode_sends(1, [1]))
    frame.fields, frame.payload_len = fields, payload_len
    with pytest.raises(MalformedFrame):
        parse_sends(frame)


def test_no_tuple_comes_off_the_wire() -> None:
    """The parsed form of the lengths is a tuple: the codec decodes every array as a list,
    so a peer cannot send one that skips the checks."""
    frame = _decoded(encode_sends(1, [16, 16]))
    assert type(frame.fields[1]) is list
