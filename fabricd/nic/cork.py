"""When small requests wait for an ACK that is coming (TCP's autocork): the initiator holds a
few back so they leave with what is posted meanwhile as one batch, and the intake leaves what
the consumer posts meanwhile in the ring until that ACK retires requests (Intake._linger)."""

from __future__ import annotations

from typing import Final

from fabricd.nic.objects import Ep, Op
from fabricd.nic.runs import Run
from proto.constants import Dtos

BATCHED: Final = frozenset({Dtos.RDMA_WRITE, Dtos.SEND})  # small ones leave as WRITES, SENDS
CORK_INFLIGHT: Final = 16  # unacknowledged requests past which a few small ones wait for an ACK
CORK_MIN: Final = 32  # ...unless this many are waiting: they leave at once


def corked(ep: Ep, seq: int) -> bool:
    """Hold a few small Writes or Sends (the first of them: ``seq``) back while many are
    on the wire and an ACK is coming (TCP's autocork): that ACK sends them, with whatever
    was posted meanwhile, as one batch. A driver that posts one WQE at a time otherwise
    has its daemon send a frame for every few. bench.ab, 64 B Writes at window 64 through
    the Python driver, (CORK_INFLIGHT, CORK_MIN):
    none -> (32, 16) 1.21, (32, 16) -> (16, 32) 1.18, 4 KiB 1.14 and 1.21; 64 B Sends and
    window 16 within noise. Latency is untouched: with fewer than CORK_INFLIGHT requests
    unacknowledged nothing waits."""
    if seq - 1 - ep.acked < CORK_INFLIGHT or ep.next_seq - seq >= CORK_MIN:
        return False
    head = ep.held[0]
    if isinstance(head, Run) and head.sent:
        return True  # its first requests are on the wire, unacknowledged
    return _ack_promised(ep, ep.ops[-len(ep.held) - 1])  # the newest request on the wire


def ack_clocked(ep: Ep) -> bool:
    """Would a small Write posted now wait for an ACK (``corked``)? At least
    CORK_INFLIGHT requests on the wire, none held, and an ACK promised for the newest: the
    intake may then leave what the consumer posts meanwhile in the ring until that ACK
    retires requests (Intake.look), as the cork would hold it anyway."""
    if ep.held or not ep.ops or ep.next_seq - 1 - ep.acked < CORK_INFLIGHT:
        return False
    return _ack_promised(ep, ep.ops[-1])


def _ack_promised(ep: Ep, newest: Op | Run) -> bool:
    """Will an ACK come for ``newest``, the EP's newest request on the wire? Yes for a Write
    or Send not yet acknowledged (a Read's answer is its response, an atomic's too)."""
    last = newest.last if isinstance(newest, Run) else newest.seq
    return newest.kind in BATCHED and last > ep.acked
