"""The target's lane for lone RDMA Writes: whole WRITE frames at the head of one read from a
peer, landed in a few calls each instead of the FrameReader's and Target's path (a 64 B Write
at window 1 is one such frame a round trip).

The lane takes a frame only when its effect is all it would have had the long way: the next
request in order (the link's ``acked`` + 1), a payload that has arrived whole, and a key whose
checks passed before for this link's EP (``grant``, called by Target._landing) while no key
has been revoked since (``MemoryRegistry.revoked``). It stops, having done nothing to that
frame, at anything else (another frame type, a duplicate, a partial frame, a header that does
not decode, a key without a grant, a range outside it), and the FrameReader and the Target take
the rest of the read as before; so every frame that is not the common one keeps one
implementation. It runs only for an authenticated link with an EP, no frame stalled or
refused, no batch collected for a process, coherent memory, and a key granted (``take``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from fabricd.memory import MemoryRegistry, Reach
from fabricd.nic.objects import Ep, PeerLink
from proto.codec import FrameReader, decode_header
from proto.errors import ProtocolError
from proto.frames import MAX_HEADER_LEN, FrameType

_LEN: Final = struct.Struct(">I")
_WRITE: Final = FrameType.WRITE


def _current(memory: MemoryRegistry, link: PeerLink) -> dict[int, Reach]:
    """The link's grants, emptied when a key was revoked or the link's EP changed since."""
    if link.grants_revoked != memory.revoked or link.grants_ep is not link.ep:
        link.grants.clear()
        link.grants_revoked, link.grants_ep = memory.revoked, link.ep
    return link.grants


def grant(memory: MemoryRegistry, link: PeerLink, ep: Ep, rmr_context: int, reach: Reach) -> None:
    """A Write under ``rmr_context`` passed the key's checks for ``ep`` (the link's) into a
    segment's memory: later Writes under it may take the lane, within the key's range."""
    if ep is link.ep and not reach.lmr.pid:
        _current(memory, link)[rmr_context] = reach


def take(
    memory: MemoryRegistry, link: PeerLink, reader: FrameReader, before: Callable[[], None]
) -> None:
    """The lane's turn at the head of ``reader``'s bytes, when nothing about the link needs
    the long way (an initiator's link has no grants: it never runs there)."""
    if (
        link.grants
        and link.authenticated
        and link.ep is not None
        and not link.stalled
        and link.fault is None
        and link.direct is None
        and not link.closed
        and memory.coherent
    ):
        reader.take_head(lambda view, start, end: land(memory, link, view, start, end, before))


def land(
    memory: MemoryRegistry,
    link: PeerLink,
    view: memoryview,
    start: int,
    end: int,
    before: Callable[[], None],
) -> int:
    """Land the lone Writes at ``view[start:end]``'s head (``before()`` first, once: frames
    queued earlier leave before a payload lands); returns where the lane stopped."""
    grants = _current(memory, link)
    if not grants:
        return start
    acked = link.acked
    ready = False
    while end - start > 4:
        (hlen,) = _LEN.unpack_from(view, start)
        head = start + 4 + hlen
        if not 0 < hlen <= MAX_HEADER_LEN or head > end:
            break
        try:
            frame = decode_header(view[start + 4 : head])
        except ProtocolError:
            break  # the FrameReader raises it
        size = frame.payload_len
        if frame.type is not _WRITE or not size or head + size > end:
            break
        seq, address, rmr_context = frame.fields
        if type(seq) is not int or seq != acked + 1 or type(rmr_context) is not int:
            break
        reach = grants.get(rmr_context)
        if reach is None or type(address) is not int:
            break
        if not (reach.start <= address and address + size <= reach.end):  # Reach.covers
            break
        if not ready:
            before()
            ready = True
        at = address - reach.origin  # Reach.bytes' place, written out: two calls a Write
        reach.target[at : at + size] = view[head : head + size]
        acked, start = seq, head + size
    if acked != link.acked:
        link.acked, link.ack_due = acked, True
    return start
