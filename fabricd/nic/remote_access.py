"""The target's look-ups for remote reads and atomics: the bytes an incoming RDMA Read or
atomic may touch, after the key, privilege, PZ, range and alignment checks."""

from __future__ import annotations

import logging

from fabricd.memory import MemoryRegistry, Span
from fabricd.nic.objects import Ep
from proto.constants import MemPriv
from proto.hostif import ATOMIC_BYTES

log = logging.getLogger("fabricd")


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
    memory: MemoryRegistry, ep: Ep, address: object, rmr_context: object, length: object
) -> memoryview | None:
    """The bytes an RDMA Read may take, or None (key, privilege, PZ or range fails)."""
    if type(address) is not int or type(rmr_context) is not int or type(length) is not int:
        return None
    if not 0 <= length <= ep.attr.max_rdma_size:
        return None
    view = memory.remote(rmr_context, address, length, MemPriv.REMOTE_READ, ep.pz, ep.handle)
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
