"""The shared-memory segments of the work queues (docs/host-interface.md section 4): an EP's send
and receive queue and its staging area, and an SRQ's receive queue; their layout and names.
The rings and their entries are proto.hostif's. Pure: no I/O."""

from __future__ import annotations

from typing import Final

from proto.attrs import MAX_DTOS, MAX_IOV
from proto.hostif import STAGE_BYTES, Ring, ring_bytes, ring_entries, wqe_size

# -- an EP's work queues ---------------------------------------------------------------------

WQ_ENTRIES: Final = ring_entries(MAX_DTOS)
WQ_ENTRY_SIZE: Final = wqe_size(MAX_IOV)
WQ_RING_BYTES: Final = ring_bytes(WQ_ENTRIES, WQ_ENTRY_SIZE)
SQ_OFFSET: Final = 0
RQ_OFFSET: Final = WQ_RING_BYTES
STAGE_OFFSET: Final = -(-2 * WQ_RING_BYTES // 4096) * 4096
WQ_SEGMENT_BYTES: Final = STAGE_OFFSET + STAGE_BYTES
"""Every EP's queues are sized for the provider's maxima (max_request_dtos and max_recv_dtos up
to MAX_DTOS, MAX_IOV segments), so dat_ep_modify never moves them; the segment is sparse: only
the slots and staged bytes used take memory."""


def wq_segment(ia_name: str, ep: int) -> str:
    """The shared-memory segment holding EP ``ep``'s send queue, then its receive queue; the
    daemon creates it with the EP, named after the IA (its HELLO name) and the EP handle."""
    return f"datfabric-{ia_name}-wq{ep}"


def wq_rings(view: memoryview, producer: bool) -> tuple[Ring, Ring]:
    """The send and receive queue of an EP's segment, from one side."""
    sq = Ring(view[SQ_OFFSET:RQ_OFFSET], WQ_ENTRIES, WQ_ENTRY_SIZE, producer)
    rq = Ring(view[RQ_OFFSET:WQ_SEGMENT_BYTES], WQ_ENTRIES, WQ_ENTRY_SIZE, producer)
    return sq, rq


# -- shared receive queues (one per SRQ) -----------------------------------------------------

SRQ_SEGMENT_BYTES: Final = WQ_RING_BYTES
"""An SRQ's segment: one receive ring of RECEIVE WQEs, sized for the provider's maximum (so
dat_srq_resize never moves it). Its consumer line carries the daemon's DONE (receives of the
SRQ completed, on whichever EP), STATE (the DAT_SRQ_STATE) and HEARD (doorbells taken)."""


def srq_segment(ia_name: str, srq: int) -> str:
    """The shared-memory segment of SRQ ``srq``'s receive queue (the daemon creates it at
    dat_srq_create, named after the IA and the SRQ handle)."""
    return f"datfabric-{ia_name}-srq{srq}"


def srq_ring(view: memoryview, producer: bool) -> Ring:
    """An SRQ's receive queue, from one side."""
    return Ring(view[:SRQ_SEGMENT_BYTES], WQ_ENTRIES, WQ_ENTRY_SIZE, producer)
