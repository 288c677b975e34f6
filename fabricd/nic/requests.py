"""One request DTO as its frame on the wire (WRITE, SEND, WRITE_IMM, READ_REQ, ATOMIC), when
it is not part of a batch (runs.take_batch and Initiator._start_batch make those), and when an
outstanding one is done."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from fabricd.nic.objects import Ep, Op
from fabricd.nic.runs import Run, read_request
from proto.codec import encode, encode_ints
from proto.constants import Dtos
from proto.frames import FrameType
from proto.hostif import ATOMIC_BYTES, Opcode

ATOMICS: Final = {Dtos.IB_FETCH_ADD: Opcode.FETCH_ADD, Dtos.IB_CMP_SWAP: Opcode.CMP_SWAP}
READ_LIKE: Final = frozenset({Dtos.RDMA_READ, *ATOMICS})  # take a read credit; land locally
ANSWERED: Final = READ_LIKE | {Dtos.BIND_MW}  # done by an answer, not by an ACK


def done(ep: Ep, item: Op | Run) -> bool:
    """Is all of ``item``, outstanding on ``ep``, done (its ACK came, or a Read's, atomic's
    or bind's answer)?"""
    if isinstance(item, Run):
        return ep.acked >= item.last
    return item.done or (item.kind not in ANSWERED and item.seq <= ep.acked)


def atomic_fits(op: Op) -> bool:
    """An atomic's local buffer is one segment of 8 bytes; the remote triplet holds 8."""
    return len(op.views) == 1 and op.length == ATOMIC_BYTES and op.remote[1] >= ATOMIC_BYTES


def request_frame(op: Op, reads_done: int) -> tuple[bytes, Sequence[memoryview]]:
    """The frame of ``op`` alone: its header and payload (a Read or atomic tells the target
    how many read responses have come back: ``reads_done``)."""
    seq, (address, length, rmr_context), n = op.seq, op.remote, op.length
    if op.kind == Dtos.RDMA_WRITE:
        return encode_ints(FrameType.WRITE, n, seq, address, rmr_context), op.views
    if op.kind == Dtos.SEND:
        return encode_ints(FrameType.SEND, n, seq), op.views
    if op.kind == Dtos.IB_RDMA_WRITE_IMMED:
        immediate = op.operands[0]
        hdr = encode_ints(FrameType.WRITE_IMM, n, seq, address, rmr_context, immediate)
        return hdr, op.views
    if op.kind == Dtos.RDMA_READ:
        return read_request(seq, address, rmr_context, length, reads_done), ()
    opcode, (operand, compare) = ATOMICS[op.kind], op.operands
    hdr = encode(FrameType.ATOMIC, seq, address, rmr_context, opcode, operand, compare, reads_done)
    return hdr, ()
