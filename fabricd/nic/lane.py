"""The lanes of a peer's read: the target's for lone RDMA Writes, whole WRITE frames at the
head of one read from a peer, landed in a call instead of the FrameReader's and Target's path
(a 64 B Write at window 1 is one such frame a round trip), and for a lone RDMA Read request
(Responder.serve, under a key kept in ``read_grants``); then the initiator's for the lone
ACKs after them, or the answer of its oldest request when that is an RDMA Read (``acks``).
A read of nothing but such Writes is answered in the same call (``answer``): its ACK is all
that is left, sent at once, the read never reaching the FrameReader's decoding or the
daemon's turn.

The Write lane takes a frame only when its effect is all it would have had the long way: the
next request in order (the link's ``acked`` + 1), a payload that has arrived whole, and a key
whose checks passed before for this link's EP (``grant``, called by Target._landing) while no
key has been revoked since (``MemoryRegistry.revoked``). It stops, having done nothing to that
frame, at anything else (another frame type, a duplicate, a partial frame, a header that does
not decode, a key without a grant, a range outside it), and the FrameReader and the Target take
the rest of the read as before; so every frame that is not the common one keeps one
implementation. Both lanes run only when nothing about the link needs the long way
(``_open``); the Write lane also needs coherent memory and a key granted (``answer``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from fabricd import _lanes as lanes
from fabricd.memory import Grant, MemoryRegistry, Reach
from fabricd.nic.objects import Ep, Op, PeerLink
from fabricd.nic.runs import Run
from proto.codec import FrameReader
from proto.constants import Dtos
from proto.frames import MAX_HEADER_LEN, FrameType
from proto.plainwqe import R_LENGTH

_WRITE: Final = int(FrameType.WRITE)
_ACK: Final = int(FrameType.ACK)
_READ_RESP: Final = int(FrameType.READ_RESP)
_RDMA_READ: Final = Dtos.RDMA_READ  # (Finals: initiator.py says why)
_lanes_lane: Final = lanes.lane
_lanes_acks: Final = lanes.acks
_lanes_read_resp: Final = lanes.read_resp


def _current(memory: MemoryRegistry, link: PeerLink) -> dict[int, Grant]:
    """The link's grants, emptied (with the Reads' keys) when a key was revoked or the link's
    EP changed since."""
    if link.grants_revoked != memory.revoked or link.grants_ep is not link.ep:
        link.grants.clear()
        link.readable.clear()
        link.grants_revoked, link.grants_ep = memory.revoked, link.ep
    return link.grants


def read_grants(memory: MemoryRegistry, link: PeerLink) -> dict[int, Grant]:
    """The keys RDMA Reads on the link passed the checks under (remote_access.readable keeps
    them), emptied as the Writes' grants are."""
    _current(memory, link)
    return link.readable


def grant(memory: MemoryRegistry, link: PeerLink, ep: Ep, rmr_context: int, reach: Reach) -> None:
    """A Write under ``rmr_context`` passed the key's checks for ``ep`` (the link's): later
    Writes under it may take the lane, within the key's range (in a C program's own memory
    too: ``land`` puts them there)."""
    if ep is link.ep:
        _current(memory, link)[rmr_context] = reach.grant()


def _open(link: PeerLink) -> bool:
    """Nothing about the link needs the long way: authenticated, an EP, no frame stalled or
    refused, no batch collected for a process, not closing."""
    return (
        link.authenticated
        and link.ep is not None
        and not link.stalled
        and link.fault is None
        and link.direct is None
        and not link.closed
    )


def answer(
    memory: MemoryRegistry,
    serve: Callable[[PeerLink, memoryview, int, int], int],
    link: PeerLink,
    reader: FrameReader,
    before: Callable[[], None],
) -> bool:
    """The target's lane at the head of a read (Nic.peer_answer), first, when nothing about
    the link needs the long way: its lone Writes (``land``: coherent memory, and a key
    granted: an initiator's link has none, so it never runs there), then a lone RDMA Read
    request (``serve``, Responder.serve: on a link that took one before). True if they were
    the whole read: all that is left is its ACK (Target.batch_end). Not after a read that
    ended a payload landing in its place: that frame is still to be handled."""
    writes = bool(link.grants) and memory.coherent
    if not ((writes or link.reads_in) and _open(link)):
        return False
    if writes:
        start, end = reader.head()
        if start != end:
            reader.took(land(reader.view, start, end, memory, link, before))
    if link.reads_in:
        start, end = reader.head()
        if start != end:
            reader.took(serve(link, reader.view, start, end))
    return reader.drained


def take_acks(
    acked: Callable[[Ep, int], None],
    landed: Callable[[Ep, Op | Run, int], None],
    link: PeerLink,
    reader: FrameReader,
) -> None:
    """The initiator's lane at the head of what the target's left (Nic.peer_lane): the lone
    ACKs, or the answer of its oldest request, a Read (``acks``), when the link's EP has
    requests outstanding and nothing about the link needs the long way."""
    ep = link.ep
    if ep is not None and ep.ops and _open(link):
        start, end = reader.head()
        if start != end:
            reader.took(acks(reader.view, start, end, ep, acked, landed))


def _oldest_read(ep: Ep) -> tuple[int, memoryview, int] | None:
    """The EP's oldest request when it is an RDMA Read not yet answered whose local buffer
    is one segment: its sequence number, that segment and its remote length (a lone one is
    a Run, runs.lone; one posted behind others an Op)."""
    item = ep.ops[0]
    if type(item) is Op:
        if item.kind == _RDMA_READ and not item.done and len(item.views) == 1:
            return item.seq, item.views[0], item.length
    elif isinstance(item, Run) and item.kind == _RDMA_READ and not item.done:
        return item.first, item.views[0], item.wqes[0][R_LENGTH]
    return None


def acks(
    view: memoryview,
    start: int,
    end: int,
    ep: Ep,
    acked: Callable[[Ep, int], None],
    landed: Callable[[Ep, Op | Run, int], None],
) -> int:
    """The initiator's lane: the lone ACKs at ``view[start:end]``'s head, read in C
    (fabricd/_lanes.c's acks: each [ACK, 0, seq] with ``seq`` below the EP's next sequence
    number); ``acked(ep, seq)`` with the highest once it took some, as Answers.acked would
    have been called for each (an ACK is cumulative). Any other frame, a malformed one or an
    ACK of a request never sent, ends it: the long way takes it. First, when the EP's oldest
    request is an RDMA Read not yet answered (then its answer is what comes next: the target
    acknowledges in order), its READ_RESP, into its one local buffer (_lanes.c's read_resp:
    the whole payload in this read, no larger than the buffer, which the Read's remote length
    covers), then ``landed(ep, item, size)``, as Answers.read_landed; the ACKs' lane only when
    that took nothing (each lane decodes the header it meets: window-1 Reads decoded theirs
    twice). Returns where it stopped."""
    read, bound = _oldest_read(ep), ep.next_seq
    if read is not None:
        bound, sink, length = read  # an ACK reaching it before its answer: the long way's
        if len(sink) <= length:  # (a larger answer than asked for is the long way's error)
            stop, size = _lanes_read_resp(view, start, end, bound, sink, _READ_RESP, MAX_HEADER_LEN)
            if stop != start:
                landed(ep, ep.ops[0], size)
                return stop
    stop, seq = _lanes_acks(view, start, end, ep.acked, bound, _ACK, MAX_HEADER_LEN)
    if stop != start:
        acked(ep, seq)
    return stop


def land(
    view: memoryview,
    start: int,
    end: int,
    memory: MemoryRegistry,
    link: PeerLink,
    before: Callable[[], None],
) -> int:
    """Land the lone Writes at ``view[start:end]``'s head, in C (fabricd/_lanes.c: each
    decoded by the codec's msgpack, in order, under a key ``grants`` holds, inside its range,
    ``before()`` called once before the first payload lands: frames queued earlier leave
    first; one in a process's memory lands in its mirror and is put into the process,
    ``ProcessMemory.put``, or the lane stops before it); returns where the lane stopped."""
    grants = _current(memory, link)
    if not grants:
        return start
    stop, acked = _lanes_lane(
        view, start, end, grants, link.acked, before, _WRITE, MAX_HEADER_LEN, memory.put_process
    )
    if acked != link.acked:
        link.acked, link.ack_due = acked, True
    return stop
