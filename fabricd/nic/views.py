"""Scatter lists: the consumer's bytes a local iov names, and payloads landing in them."""

from __future__ import annotations

from collections.abc import Sequence

from fabricd.memory import Lmr, MemoryRegistry, Span
from fabricd.nic.objects import Consumer
from proto.checks import Region, check_local_iov
from proto.constants import MemPriv


def local_views(
    memory: MemoryRegistry, consumer: Consumer, pz: int, iov: object, need: MemPriv
) -> tuple[list[memoryview], int, list[Span]]:
    """The consumer's bytes a local iov names, checked as dat_ep_post_* specify; the spans
    are every segment's when one of them is a process's own memory (else none).

    ``iov`` is a WQE's segments (read_wqe: int triplets within their C types). The common
    post, one segment that passes every check (``one_segment``), is answered without
    check_local_iov (1.7 -> 0.8 us, timeit); anything else goes through it, which gives the
    error when there is one."""
    lmrs = memory.by_lmr_context
    owner = consumer.id
    if type(iov) is tuple and len(iov) == 1:
        address, length, context = iov[0]
        lmr = one_segment(lmrs, owner, pz, int(need), address, length, context)
        if lmr is not None:
            return [lmr.local(address, length)], length, [(lmr, address, length)] if lmr.pid else []
    found: list[Lmr] = []  # the LMR of each segment looked up, in the order check_local_iov uses

    def lookup(ctx: int) -> Region | None:
        lmr = lmrs.get(ctx)
        if lmr is None or lmr.owner != owner:
            return None
        found.append(lmr)
        return lmr.region

    used = check_local_iov(iov, lookup, pz, need, 1 << 16)
    if len(used) == 1:  # the common post: no generator, no zip
        lmr, (_, address, length) = found[0], used[0]
        return [lmr.local(address, length)], length, [(lmr, address, length)] if lmr.pid else []
    pairs = list(zip(found, used, strict=True))
    views = [lmr.local(a, n) for lmr, (_, a, n) in pairs]
    spans = [(lmr, a, n) for lmr, (_, a, n) in pairs] if any(lmr.pid for lmr in found) else []
    return views, sum(n for _, _, n in used), spans


def one_segment(
    lmrs: dict[int, Lmr], owner: int, pz: int, need: int, address: int, length: int, context: int
) -> Lmr | None:
    """The LMR of a post's one local segment when the segment passes every check of
    check_local_iov (not empty, a key of consumer ``owner``'s in PZ ``pz`` with privilege
    ``need``, the bytes inside its range; ``lmrs``: MemoryRegistry.by_lmr_context); None when
    any fails (check_local_iov says which)."""
    lmr = lmrs.get(context)
    if (
        length
        and lmr is not None
        and lmr.owner == owner
        and (region := lmr.region).pz == pz
        and not need & ~int(region.privileges)
        and region.contains(address, length)
    ):
        return lmr
    return None


def truncate_spans(spans: Sequence[Span], length: int) -> list[Span]:
    """The front of a span list holding exactly ``length`` bytes."""
    out = []
    for lmr, address, n in spans:
        if length <= 0:
            break
        take = min(n, length)
        out.append((lmr, address, take))
        length -= take
    return out


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


def scatter(data: bytes | bytearray | memoryview, sink: Sequence[memoryview]) -> None:
    """Copy collected bytes into a sink."""
    data = memoryview(data)  # slices below are views, the one copy is into the sink
    pos = 0
    for v in sink:
        v[:] = data[pos : pos + len(v)]
        pos += len(v)


_SCRATCH = memoryview(bytearray(64 * 1024))  # where bytes that must land nowhere are read to


def scratch(length: int) -> list[memoryview]:
    """A sink of ``length`` bytes that are thrown away (part of a batch that must not land)."""
    out = []
    while length > 0:
        n = min(length, len(_SCRATCH))
        out.append(_SCRATCH[:n])
        length -= n
    return out
