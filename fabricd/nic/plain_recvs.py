"""Runs of plain receives (one segment, proto/plainwqe.py) taken off an EP's receive queue:
read, checked and made Recvs in C (fabricd/_plaintake.c), one key per call, and queued on the
EP (Target.post_recv_plain)."""

from __future__ import annotations

from typing import Final

from fabricd import _plaintake as plaintake
from fabricd.memory import MemoryRegistry
from fabricd.nic.objects import Ep, Recv
from proto.constants import MemPriv
from proto.hostif import SLOTS, Ring
from proto.plainwqe import PLAIN_RECEIVES

_LOCAL_WRITE: Final = int(MemPriv.LOCAL_WRITE)  # what a receive needs of its segment
_RECEIVE: Final = sum(1 << op for op in PLAIN_RECEIVES)  # plaintake.receives' opcodes: a bit each


def take(memory: MemoryRegistry, ep: Ep, rq: Ring) -> int:
    """The plain receives at the head of ``rq``, up to the first that is not one or whose
    segment fails a check (Target.post_recv gives the error), queued on ``ep`` and published
    off the ring; how many. A receive into a process's own memory keeps its span: its bytes
    are stored there when a Send fills it."""
    taken, lmr = 0, None
    lmrs, owner, pz, size = memory.by_lmr_context, ep.consumer.id, ep.pz, rq.entry_size
    while count := rq.available():
        first = rq.mine & rq.mask
        n = min(count, rq.entries - first)  # to the ring's end: the rest is the next stretch
        recvs, lmr = plaintake.receives(
            rq.view, SLOTS + first * size, n, size, _RECEIVE, lmrs, owner, pz, _LOCAL_WRITE,
            lmr, Recv,
        )  # fmt: skip
        if not recvs:
            break
        ep.recvs.extend(recvs)
        rq.publish(len(recvs))
        taken += len(recvs)
    return taken
