"""The common WQE of the host interface (docs/host-interface.md section 4): a SEND, RDMA_WRITE
or RECEIVE of one segment and no operands, its bytes in that segment or staged. A driver writes
it with one pack of hostif.WQE_ONE. ``plain_run`` is the rule in Python: which slots are the
common WQE, as one unpack for a run; the daemon reads runs with fabricd/_plaintake.c, which
tests/unit/test_plaintake.py holds to it. Any other WQE goes through hostif.write_wqe and
hostif.read_wqe, which check every rule; a plain one passes all of them by construction."""

from __future__ import annotations

import functools
import struct
from typing import Final

from proto.constants import CompletionFlags
from proto.hostif import SLOTS, STAGE_BYTES, STAGED, WQE_ONE, Opcode, Ring

_FENCE: Final = int(CompletionFlags.BARRIER_FENCE)  # a plain int: IntFlag operators are slow


PlainWqe = tuple[int, ...]
"""A plain WQE's 14 fields as ``plain_run`` gives them, in the slot's order: opcode, WQE flags,
num_segments (1), completion_flags, cookie, the remote triplet, stage offset, operand and
compare (both 0), then its one segment (virtual_address, length, lmr_context). Of no fixed
length to mypy, so the compiled modules keep it the one tuple object it is: as a 14-tuple type
mypyc made a C struct of it, unboxing all 14 fields wherever it was bound (``runs.lone`` took
~3.3 us of a window-1 Write's turn, timestamps around it in situ)."""
# Indices of a PlainWqe's fields: its completion flags, cookie, remote triplet and length
# (each Final: a compiled module reads it as a number, not from this module's dictionary)
FLAGS: Final = 3
COOKIE: Final = 4
R_ADDRESS: Final = 5
R_LENGTH: Final = 6
R_CONTEXT: Final = 7
LENGTH: Final = 12
PLAIN_AT: Final = (FLAGS, COOKIE, LENGTH)
"""Where proto.events.write_rows finds a completion's flags, cookie and length in a PlainWqe."""
PLAIN_REQUESTS: Final = frozenset({int(Opcode.SEND), int(Opcode.RDMA_WRITE)})
"""The opcodes of the send queue's common WQE (plain_run)."""
PLAIN_RECEIVES: Final = frozenset({int(Opcode.RECEIVE)})
"""The receive queue's (plain_run): a receive of one segment."""


def plain_run(ring: Ring, opcodes: frozenset[int] = PLAIN_REQUESTS) -> list[PlainWqe]:
    """Consumer: the common WQEs from the ring's index on, as their fields (no Wqe to build),
    up to the first that is not one, the last published or the ring's end (the rest is the
    next run); none taken: the caller publishes those it takes. A common WQE is one of
    ``opcodes`` (a SEND or RDMA_WRITE, or a RECEIVE) with one segment and no operands, a
    request's bytes in that segment or staged inside the area (unfenced); hostif.read_wqe
    reads any other, and tells what is wrong with it. Every rule read_wqe checks holds for a
    WQE this returns. One unpack for the run."""
    count = ring.available()
    if not count:
        return []
    first = ring.mine & ring.mask
    n, size = min(count, ring.entries - first), ring.entry_size
    at = SLOTS + first * size
    run = []
    for fields in _slots(size).iter_unpack(ring.view[at : at + n * size]):
        if not _is_plain(fields, opcodes):
            break
        run.append(fields)
    return run


@functools.cache
def _slots(size: int) -> struct.Struct:
    """A slot of ``size`` bytes as plain_run reads it (the rest of the slot skipped)."""
    return struct.Struct(WQE_ONE.format + f"{size - WQE_ONE.size}x")


def _is_plain(fields: PlainWqe, opcodes: frozenset[int]) -> bool:
    """plain_run's rule, on a slot's fields."""
    raw_op, wqe_flags, count, flags, _, _, _, _, offset, operand, compare, _, length, _ = fields
    if raw_op not in opcodes or count != 1 or operand or compare:
        return False
    if not wqe_flags:
        return not offset
    if raw_op not in PLAIN_REQUESTS or wqe_flags != STAGED or flags & _FENCE:
        return False
    return offset + length <= STAGE_BYTES
