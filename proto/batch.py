"""Batched RDMA Writes and Sends on the peer wire: many small requests to one peer in one frame.

A WRITES frame is ``[WRITES, payload_len, seq, ops]``: ``ops`` is a msgpack bin of one 16-byte
``WRITE_OP`` (address u64, rmr_context u32, length u32, little-endian) for each of the requests
``seq``, ``seq + 1``, ... in order, and the payload is their bytes one after the other
(``payload_len`` is the sum of the lengths). A SENDS frame is ``[SENDS, payload_len, seq,
lengths]``, the same for Sends. Each operation keeps its own sequence number, so ACKs, NAKs,
duplicates and flush order mean what they mean for single frames: the target executes them one
by one, as if they had come as WRITE or SEND frames.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from proto import _rows as rows_c
from proto.codec import Frame, encode
from proto.errors import MalformedFrame
from proto.frames import FrameType

MAX_OPS: Final = 256
"""Most operations one WRITES or SENDS frame may carry."""
MAX_OP_BYTES: Final = 16 * 1024
"""A Write or Send larger than this goes alone: batching saves per-frame costs, not copies."""
MAX_BATCH_BYTES: Final = 256 * 1024
"""Largest payload a sender puts in one WRITES or SENDS frame."""
WRITE_OP: Final = struct.Struct("<QII")
"""One Write of a WRITES frame's ``ops``: address, rmr_context, length. Fixed-size, so the
target unpacks the list in one call, its fields unsigned by construction (a list of msgpack
arrays cost the two daemons ~0.4 us more per Write: encode, decode, checks; timeit)."""

WriteOp = tuple[int, int, int]
"""(address, rmr_context, length) of one Write in a batch."""


def encode_writes(seq: int, ops: list[WriteOp]) -> bytes:
    """The header of a WRITES frame for ``ops``, the first of which has sequence number
    ``seq`` (its payload, the ops' bytes in order, follows it on the stream)."""
    return encode_write_rows(seq, ops, (0, 1, 2), sum(op[2] for op in ops))


def encode_write_rows(
    seq: int, rows: Sequence[tuple[int, ...]], fields: tuple[int, int, int], payload_len: int
) -> bytes:
    """encode_writes for Writes given as rows holding each one's address, rmr_context and
    length at the indices ``fields`` (a plain WQE's fields: no tuple per Write), whose bytes
    add up to ``payload_len``; the Write list packed in C (proto/_rows.c)."""
    packed = rows_c.pack_writes(rows, *fields)
    return encode(FrameType.WRITES, seq, packed, payload_len=payload_len)


def parse_writes(frame: Frame) -> tuple[int, list[WriteOp]]:
    """The first sequence number and the operations of a WRITES frame, checked for shape
    (MalformedFrame otherwise); validated once, the operations replace the raw field."""
    seq, ops = frame.fields
    if type(ops) is tuple:  # parsed already
        return seq, list(ops)
    if type(seq) is not int or seq < 1:
        raise MalformedFrame("a WRITES frame's sequence number must be a positive integer")
    size = WRITE_OP.size
    if type(ops) is not bytes or len(ops) % size or not 0 < len(ops) <= MAX_OPS * size:
        raise MalformedFrame(f"a WRITES frame carries 1..{MAX_OPS} operations of {size} bytes")
    parsed: list[WriteOp] = list(WRITE_OP.iter_unpack(ops))
    total = sum([n for _, _, n in parsed])
    if total != frame.payload_len:
        raise MalformedFrame(f"Writes of {total} bytes in a {frame.payload_len}-byte payload")
    frame.fields[1] = tuple(parsed)
    return seq, parsed


def encode_sends(seq: int, lengths: Sequence[int]) -> bytes:
    """The header of a SENDS frame: Sends of ``lengths`` bytes from sequence number ``seq``."""
    return encode(FrameType.SENDS, seq, lengths, payload_len=sum(lengths))


def parse_sends(frame: Frame) -> tuple[int, Sequence[int]]:
    """The first sequence number and the lengths of a SENDS frame (MalformedFrame if the
    header is not that); validated once, the lengths replace the raw field."""
    seq, lengths = frame.fields
    if type(lengths) is tuple:  # parsed already
        return seq, lengths
    if type(seq) is not int or seq < 1:
        raise MalformedFrame("a SENDS frame's sequence number must be a positive integer")
    if type(lengths) is not list or not 0 < len(lengths) <= MAX_OPS:
        raise MalformedFrame(f"a SENDS frame carries 1..{MAX_OPS} operations")
    if set(map(type, lengths)) != {int} or min(lengths) < 0 or sum(lengths) != frame.payload_len:
        raise MalformedFrame(f"Sends of {lengths!r} in a {frame.payload_len}-byte payload")
    frame.fields[1] = tuple(lengths)
    return seq, lengths


def last_seq(frame: Frame) -> int:
    """The sequence number of the last request a frame of REQUESTS, WRITES or SENDS carries."""
    seq = frame.fields[0]
    if type(seq) is not int:
        raise MalformedFrame("a request's sequence number must be an integer")
    if frame.type in (FrameType.WRITES, FrameType.SENDS):
        ops = frame.fields[1]
        if frame.type == FrameType.WRITES and type(ops) is bytes:  # unparsed: WRITE_OPs
            return seq + max(len(ops) // WRITE_OP.size - 1, 0)
        return seq + (len(ops) - 1 if type(ops) in (list, tuple) and ops else 0)
    return seq
