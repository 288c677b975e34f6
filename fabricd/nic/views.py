"""Scatter lists: the consumer's bytes a local iov names, and payloads landing in them."""

from __future__ import annotations

from collections.abc import Sequence

from fabricd.memory import Lmr, MemoryRegistry
from fabricd.nic.objects import Consumer, Ep
from proto.checks import Region, check_local_iov
from proto.constants import MemPriv


def local_views(
    memory: MemoryRegistry, consumer: Consumer, ep: Ep, iov: object, need: MemPriv
) -> tuple[list[memoryview], int]:
    """The consumer's bytes a local iov names, checked as dat_ep_post_* specify."""
    found: dict[int, Lmr] = {}  # id(region) -> its LMR, for the segments that pass

    def lookup(ctx: int) -> Region | None:
        lmr = memory.by_lmr_context.get(ctx)
        if lmr is None or lmr.owner != consumer.id:
            return None
        found[id(lmr.region)] = lmr
        return lmr.region

    used = check_local_iov(iov, lookup, ep.pz, need, 1 << 16)
    views = [found[id(region)].local(address, length) for region, address, length in used]
    return views, sum(length for _, _, length in used)


def truncate(views: Sequence[memoryview], length: int) -> list[memoryview]:
    """The front of a scatter list holding exactly ``length`` bytes (front segments filled)."""
    out = []
    for v in views:
        if length <= 0:
            break
        take = min(len(v), length)
        out.append(v[:take])
        length -= take
    return out


def scatter(data: bytes, sink: Sequence[memoryview]) -> None:
    """Copy collected bytes into a sink."""
    pos = 0
    for v in sink:
        v[:] = data[pos : pos + len(v)]
        pos += len(v)
