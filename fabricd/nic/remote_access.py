"""The target's look-ups for remote access: the bytes an incoming RDMA Write, Read or atomic
may touch, after the key, privilege, PZ, range and alignment checks."""

from __future__ import annotations

import logging
from typing import Final

from fabricd import _landing as landing
from fabricd.memory import Grant, MemoryRegistry, Reach, Span
from fabricd.nic.objects import Ep, PeerLink
from fabricd.nic.views import scratch
from fabricd.procmem import PlannedWrites, Scatter, add_piece
from proto.batch import WriteOp
from proto.constants import DtoCompletionStatus as St
from proto.constants import MemPriv
from proto.hostif import ATOMIC_BYTES

log = logging.getLogger("fabricd")
_REMOTE_WRITE: Final = MemPriv.REMOTE_WRITE
_REMOTE_READ: Final = MemPriv.REMOTE_READ
DIRECT_MAX: Final = 16 * 1024  # most bytes a WRITES batch goes with straight to a process


def write_targets(
    memory: MemoryRegistry, link: PeerLink, ep: Ep, seq: int, ops: list[WriteOp]
) -> list[memoryview]:
    """The sink of a WRITES frame: each Write's target bytes in turn; a Write seen before,
    the one that fails its checks (``link.fault``) and every one after it land nowhere. The
    common batch (all new, under one key, every Write inside its range) is fabricd/_landing.c's;
    the loop below takes any other, and says which Write fails."""
    coherent = memory.coherent
    if seq > link.acked and link.fault is None and coherent:
        first = ops[0][1]
        common = memory.reach(first, _REMOTE_WRITE, ep.pz, ep.handle)
        if common is not None:
            landed = landing.views(
                ops, first, common.start, common.end, common.origin, common.target
            )
            if landed is not None:
                return landed
    views: list[memoryview] = []
    key: int | None = None  # the last key's checks hold for every Write under it
    reach: Reach | None = None
    for i, (address, rmr_context, length) in enumerate(ops):
        if seq + i <= link.acked or link.fault is not None:
            views.extend(scratch(length))
            continue
        if rmr_context != key:
            key, reach = rmr_context, memory.reach(rmr_context, _REMOTE_WRITE, ep.pz, ep.handle)
        view = None if reach is None else reach.bytes(address, length)
        if view is None:
            link.fault = (seq + i, St.DTO_ERR_REMOTE_ACCESS)
            views.extend(scratch(length))
            continue
        if not coherent:
            memory.mark_written(rmr_context, address, length)
        views.append(view)
    return views


def direct_writes(
    memory: MemoryRegistry, link: PeerLink, ep: Ep, frame_bytes: int, seq: int, ops: list[WriteOp]
) -> PlannedWrites | None:
    """Can a WRITES batch go from its payload straight into a C program's memory (no mirror
    in between, no view per Write)? Yes when every Write is new, passes its key's checks and
    lands in one process's memory (coherent mode): the plan for that process, in which a Write
    that continues the piece before it (its target and its bytes right after that piece's)
    extends it, and one onto exactly the same bytes replaces it (the last Write's bytes win).
    None: the batch lands as any other (write_targets), and always when its ``frame_bytes``
    pass DIRECT_MAX (4 KiB Writes, batched up to 256 KiB: no gain measured, and a fresh
    buffer per batch)."""
    if seq <= link.acked or link.fault is not None or not memory.coherent:
        return None
    if frame_bytes > DIRECT_MAX:
        return None
    pid, key, offset = 0, None, 0
    plan: list[Scatter] = []
    reach: Reach | None = None
    for address, rmr_context, length in ops:
        if rmr_context != key:
            key, reach = rmr_context, memory.reach(rmr_context, _REMOTE_WRITE, ep.pz, ep.handle)
            if reach is None or not reach.lmr.pid or pid not in (0, reach.lmr.pid):
                return None
            pid = reach.lmr.pid
        if reach is None or not length or not reach.covers(address, length):
            return None
        add_piece(plan, address, offset, length)
        offset += length
    return PlannedWrites(pid, plan, memory.revoked)


def stored(memory: MemoryRegistry, rmr_context: object, address: object, length: int) -> bool:
    """An RDMA Write that landed in a process's mirror reaches the process (before its ACK);
    False if the process's memory could not be written, or if its key was revoked (an LMR
    freed, an RMR unbound) while its bytes came: a NIC whose key is gone fails the Write, as
    the straight path does (MemoryRegistry.store_payload)."""
    if type(rmr_context) is not int or type(address) is not int:
        return True  # refused at landing already
    if rmr_context not in memory.by_rmr_context:
        log.info("RDMA Write to %#x+%d: its key was revoked while its bytes came", address, length)
        return False
    spans = memory.remote_spans(rmr_context, address, length)
    if spans and not memory.store(spans):
        log.info("RDMA Write to %#x+%d: the buffer is gone from its process", address, length)
        return False
    return True


def stored_writes(memory: MemoryRegistry, link: PeerLink, seq: int, ops: list[WriteOp]) -> None:
    """A WRITES batch landed: the Writes that executed (new, before any that failed) reach
    their processes together, one transfer per process; if that fails, one by one, and the
    first that cannot be written is the batch's fault (``link.fault``). A Write whose key was
    revoked while the batch's bytes came is the fault too (``stored``)."""
    first = max(seq, link.acked + 1)
    last = link.fault[0] if link.fault is not None else seq + len(ops)
    fresh = ops[first - seq : max(last - seq, 0)]
    key = fresh[0][1] if fresh else None
    # the common batch, one key not revoked meanwhile: its bytes merged in C, not Write by Write
    if key in memory.by_rmr_context and (touched := landing.ranges(fresh, key)) is not None:
        lmr = memory.process_lmr(key)
        if lmr is None or memory.store([(lmr, start, end - start) for start, end in touched]):
            return  # (a store that failed: the loop below finds the Write)
    spans: list[Span] = []
    key, lmr, end = None, None, len(fresh)  # end: the first Write whose key was revoked
    for i, (address, rmr_context, length) in enumerate(fresh):
        if rmr_context != key:
            if rmr_context not in memory.by_rmr_context:
                end = i
                break
            key, lmr = rmr_context, memory.process_lmr(rmr_context)
        if lmr is not None and length:
            spans.append((lmr, address, length))
    if spans and not memory.store(spans):
        for i, (address, rmr_context, length) in enumerate(fresh[:end]):
            if not stored(memory, rmr_context, address, length):
                link.fault = (first + i, St.DTO_ERR_REMOTE_ACCESS)
                return
    if end < len(fresh):
        log.info("a batch's Write %d: its key was revoked while its bytes came", first + end)
        link.fault = (first + end, St.DTO_ERR_REMOTE_ACCESS)


def atomic_target(
    memory: MemoryRegistry, ep: Ep, address: object, rmr_context: object
) -> tuple[memoryview, list[Span]] | None:
    """The 8 bytes an atomic may change (fetched from their process if it owns them) and
    their spans there, to store the result; None if the key, REMOTE_ATOMIC privilege, PZ,
    range or alignment fails."""
    if type(address) is not int or type(rmr_context) is not int or address % ATOMIC_BYTES:
        return None
    need = MemPriv.REMOTE_ATOMIC
    view = memory.remote(rmr_context, address, ATOMIC_BYTES, need, ep.pz, ep.handle)
    if view is None:
        return None
    spans = memory.remote_spans(rmr_context, address, ATOMIC_BYTES)
    if spans and not memory.fetch(spans):
        return None
    return view, spans


def readable(
    memory: MemoryRegistry,
    ep: Ep,
    address: object,
    rmr_context: object,
    length: object,
    known: dict[int, Grant],
) -> memoryview | None:
    """The bytes an RDMA Read may take, or None (key, privilege, PZ or range fails). A key
    whose checks passed for ``ep`` is kept in ``known`` (the link's: lane.read_grants, emptied
    when a key is revoked or the link's EP changes) when it reaches a segment in coherent
    memory, where nothing but its range is left to check: the target's Read lane answers the
    next small Reads under it in C (Responder.serve)."""
    if type(address) is not int or type(rmr_context) is not int or type(length) is not int:
        return None
    if not 0 <= length <= ep.attr.max_rdma_size:
        return None
    reach = memory.reach(rmr_context, _REMOTE_READ, ep.pz, ep.handle)
    if reach is not None and not reach.pid and memory.coherent:
        known[rmr_context] = reach.grant()
    view = None if reach is None else reach.bytes(address, length)
    spans = memory.remote_spans(rmr_context, address, length) if view else []
    if spans and not memory.fetch(spans):
        log.info("RDMA Read of %#x+%d: the buffer is gone from its process", address, length)
        return None
    stale = view is not None and not memory.coherent
    if stale and memory.stale(rmr_context, address, length):
        log.warning(
            "RDMA Read of %#x+%d on EP %d serves the I/O view, which differs from the "
            "CPU's bytes: dat_lmr_sync_rdma_read was not called after they were written",
            address,
            length,
            ep.handle,
        )
    return view
