"""Runs of plain receives (one segment, proto/plainwqe.py) taken off an EP's receive queue:
read and checked in C (fabricd/_plaintake.c), one key per call, and queued on the EP as
Recvs (Target.post_recv_plain)."""

from __future__ import annotations

from typing import Final

from fabricd import _plaintake as plaintake
from fabricd.memory import MemoryRegistry
from fabricd.nic.objects import Ep, Recv
from proto.constants import MemPriv
from proto.hostif import SLOTS, Ring
from proto.plainwqe import PLAIN_RECEIVES

_LOCAL_WRITE: Final = int(MemPriv.LOCAL_WRITE)  # what a receive needs of its segment
_RECEIVE: Final = sum(1 << op for op in PLAIN_RECEIVES)  # plaintake.take's opcodes: a bit each
_NO_STAGE: Final = memoryview(b"")  # a receive is never staged


def take(memory: MemoryRegistry, ep: Ep, rq: Ring) -> int:
    """The plain receives at the head of ``rq``, up to the first that is not one or whose
    segment fails a check (Target.post_recv gives the error), queued on ``ep`` and published
    off the ring; how many. A receive into a process's own memory keeps its span: its bytes
    are stored there when a Send fills it."""
    taken, recvs, lmr = 0, ep.recvs, None
    lmrs, owner, pz, size = memory.by_lmr_context, ep.consumer.id, ep.pz, rq.entry_size
    while count := rq.available():
        first = rq.mine & rq.mask
        n = min(count, rq.entries - first)  # to the ring's end: the rest is the next stretch
        wqes, views, _, _, lmr = plaintake.take(
            rq.view, SLOTS + first * size, n, size, _RECEIVE, lmrs, owner, pz, _LOCAL_WRITE,
            lmr, _NO_STAGE, True,
        )  # fmt: skip
        if not wqes:
            break
        assert lmr is not None  # the key of every receive taken
        stored = lmr.pid != 0
        for wqe, view in zip(wqes, views, strict=True):
            _, _, _, flags, cookie, _, _, _, _, _, _, address, n, _ = wqe
            recvs.append(Recv(cookie, flags, [view], n, [(lmr, address, n)] if stored else []))
        rq.publish(len(wqes))
        taken += len(wqes)
    return taken
