"""Runs of plain requests: the small RDMA Writes (or Sends) of one plain_run that
Initiator.post_plain took off a send queue together, kept as one object from post to
completion in place of an Op each (making an Op timed at 0.28-0.52 us in CPython 3.11 on this
VM; in memory, both daemons' cores 4.95 -> 4.27 us per 64 B Write with runs). The common
path (queue, batch, ACK, complete) takes them as they are; anything else first turns the EP's
runs back into Ops (``expand``): a flush, a failure, a fault rule, a look-up by sequence
number. So every rule of the RC initiator is still written once, for Ops."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Final, cast

from fabricd.nic.objects import Ep, Op
from proto.batch import MAX_BATCH_BYTES, MAX_OP_BYTES, MAX_OPS, encode_sends, encode_write_rows
from proto.codec import encode_framed, encode_ints
from proto.constants import CompletionFlags, Dtos
from proto.frames import FrameType
from proto.hostif import Opcode
from proto.plainwqe import COOKIE, FLAGS, LENGTH, R_ADDRESS, R_CONTEXT, R_LENGTH, PlainWqe

_KINDS: Final = {
    int(Opcode.SEND): Dtos.SEND,
    int(Opcode.RDMA_WRITE): Dtos.RDMA_WRITE,
    int(Opcode.RDMA_READ): Dtos.RDMA_READ,  # only ever alone (``lone``)
}
_FENCE: Final = int(CompletionFlags.BARRIER_FENCE)
_WRITE: Final = int(FrameType.WRITE)
_READ_REQ: Final = int(FrameType.READ_REQ)
_RDMA_READ: Final = Dtos.RDMA_READ  # (Finals: initiator.py says why)
_RDMA_WRITE: Final = Dtos.RDMA_WRITE
ALONE: Final = -1  # the group of a plain WQE that is an Op (``group``)


@dataclass(eq=False, slots=True)
class Run:
    """Requests of one ``kind`` (RDMA_WRITE or SEND), each at most MAX_OP_BYTES and unfenced,
    with sequence numbers ``first`` on: their WQEs' fields, their bytes' views, how many bytes
    in all, how many have gone on the wire (ep.held holds the run until all have) and how many
    completed (ep.ops holds it until all have). Or an RDMA_READ alone (``lone``): done when
    its answer has landed whole, which raises the EP's ``acked`` to it (answers.Answers)."""

    kind: Dtos
    first: int
    wqes: list[PlainWqe]
    views: list[memoryview]
    nbytes: int
    sent: int = 0
    done: int = 0

    @property
    def last(self) -> int:
        """The sequence number of the run's last request."""
        return self.first + len(self.wqes) - 1

    def ops(self) -> list[Op]:
        """The requests not yet completed, as Ops (a Read's length is its remote one, as
        Initiator.post gives it)."""
        kind, first, views = self.kind, self.first, self.views
        at = R_LENGTH if kind == Dtos.RDMA_READ else LENGTH
        return [
            Op(kind, w[COOKIE], w[FLAGS], first + i, w[at], [views[i]], False, [],
               (w[R_ADDRESS], w[R_LENGTH], w[R_CONTEXT]))
            for i, w in enumerate(self.wqes[self.done :], self.done)
        ]  # fmt: skip


def expand(ep: Ep) -> deque[Op]:
    """The EP's outstanding requests with every run turned into its Ops, in place (ep.held
    gets the same Op objects for what has not gone on the wire); the EP's ops."""
    if any(isinstance(item, Run) for item in ep.ops):
        made: dict[int, list[Op]] = {}
        ops: list[Op | Run] = []
        for item in ep.ops:
            if isinstance(item, Run):
                made[id(item)] = each = item.ops()
                ops.extend(each)
            else:
                ops.append(item)
        held: list[Op | Run] = []
        for item in ep.held:
            if isinstance(item, Run):
                held.extend(made[id(item)][item.sent - item.done :])
            else:
                held.append(item)
        ep.ops.clear()
        ep.ops.extend(ops)
        ep.held.clear()
        ep.held.extend(held)
    return cast("deque[Op]", ep.ops)


def find(ep: Ep, seq: object) -> Op | None:
    """The outstanding request with sequence number ``seq`` (requests are in seq order); one
    inside a run turns the EP's runs into Ops first."""
    if type(seq) is not int:
        return None
    for item in ep.ops:
        if isinstance(item, Run):
            if item.first + item.done <= seq <= item.last:
                expand(ep)
                return find(ep, seq)  # once: no run is left
            if item.first > seq:
                break
        elif item.seq == seq:
            return item
        elif item.seq > seq:
            break
    return None


def group(wqe: PlainWqe) -> int:
    """A plain WQE's group for ``queue``: its opcode when it may join a run of that kind
    (unfenced, at most MAX_OP_BYTES), else ALONE."""
    return ALONE if wqe[FLAGS] & _FENCE or wqe[LENGTH] > MAX_OP_BYTES else wqe[0]


def queue(ep: Ep, wqes: list[PlainWqe], views: list[memoryview], total: int, mixed: bool) -> None:
    """Queue checked plain WQEs (their bytes: ``views``, ``total`` in all) in posting order:
    as one Run when every one is in the first one's ``group`` (``mixed`` False), else a Run
    for each stretch of one group and an Op for each ALONE one (a fenced or large Write or
    Send: the initiator's Op rules hold it). A Run of one kind that joins the newest held
    Run of its kind, none of whose requests has gone on the wire, becomes part of it: the
    stretches a take finds while its consumer posts (a C program posting a window: ~12
    stretches a batch) are one Run to send, complete and retire, not one each."""
    seq = ep.next_seq
    ep.next_seq = seq + len(wqes)
    if not mixed:
        kind = _KINDS[wqes[0][0]]
        tail = ep.held[-1] if ep.held else None
        if isinstance(tail, Run) and tail.kind == kind and not tail.sent:
            tail.wqes += wqes  # the newest request: these follow it, in order
            tail.views += views
            tail.nbytes += total
            return
        run = Run(kind, seq, wqes, views, total)
        ep.ops.append(run)
        ep.held.append(run)
        return
    for key, stretch_at in groupby(range(len(wqes)), lambda i: group(wqes[i])):
        at = list(stretch_at)
        lo, hi = at[0], at[-1] + 1
        stretch = wqes[lo:hi]
        run = Run(_KINDS[stretch[0][0]], seq + lo, stretch, views[lo:hi], 0)
        items: Sequence[Op | Run] = (run,)
        if key == ALONE:
            items = run.ops()  # made as a run's, with their numbers
        else:
            run.nbytes = sum(w[LENGTH] for w in stretch)
        ep.ops.extend(items)
        ep.held.extend(items)


def take_batch(ep: Ep) -> tuple[bytes, list[memoryview]]:
    """The next requests of the runs at the head of the EP's held queue (the head is one),
    from as many runs of its kind as follow each other, up to MAX_OPS and MAX_BATCH_BYTES, as
    one WRITES (SENDS) frame (a lone Write as a WRITE frame): its header and payload. They are
    marked sent; a run all sent leaves the held queue."""
    held = ep.held
    head = held[0]
    assert isinstance(head, Run)  # the initiator's word
    kind, first = head.kind, head.first + head.sent
    seq, total = first, 0  # the next request's sequence number; the batch's bytes
    wqes: list[PlainWqe] = []
    views: list[memoryview] = []
    while held:
        run = held[0]
        if not isinstance(run, Run) or run.kind != kind or run.first + run.sent != seq:
            break
        lo, end = run.sent, len(run.wqes)
        hi = min(end, lo + MAX_OPS - len(wqes))
        if not lo and hi == end and total + run.nbytes <= MAX_BATCH_BYTES:
            total += run.nbytes  # the common batch: whole runs
        else:
            for i in range(lo, hi):
                n = run.wqes[i][LENGTH]
                if total + n > MAX_BATCH_BYTES:
                    hi = i
                    break
                total += n
        wqes += run.wqes[lo:hi]
        views += run.views[lo:hi]
        seq += hi - lo
        run.sent = hi
        if hi < end:
            break
        held.popleft()
    return _header(kind, first, wqes, total), views


def lone(ep: Ep, wqe: PlainWqe, view: memoryview) -> tuple[bytes, list[memoryview]]:
    """A plain WQE posted while none of the EP's requests is outstanding (a request-reply
    consumer's next post): queued as a Run already on the wire, not held, and its frame (sent
    by the caller: a header and its payload's views; a Write's whole frame in one buffer, as
    the stream's flush would have joined it), without ``queue``'s and ``take_batch``'s steps:
    nothing can join it or hold it back (no cork with nothing unacknowledged, no Read in
    flight). An RDMA Read (its segment the local buffer) takes a read credit; its READ_REQ
    tells the target how many responses came back."""
    seq = ep.next_seq
    ep.next_seq = seq + 1
    run = Run(_KINDS[wqe[0]], seq, [wqe], [view], wqe[LENGTH], 1)
    ep.ops.append(run)
    if run.kind == _RDMA_READ:
        ep.reads_out += 1
        return read_request(seq, wqe[R_ADDRESS], wqe[R_CONTEXT], wqe[R_LENGTH], ep.reads_done), []
    if run.kind == _RDMA_WRITE and run.nbytes <= MAX_OP_BYTES:  # (larger: its views alone)
        return encode_framed(view, _WRITE, seq, wqe[R_ADDRESS], wqe[R_CONTEXT]), []
    return _header(run.kind, seq, run.wqes, run.nbytes), run.views


def read_request(seq: int, address: int, rmr_context: int, length: int, reads_done: int) -> bytes:
    """An RDMA Read's READ_REQ frame (a header: no payload), telling the target how many
    read responses have come back (``reads_done``)."""
    return encode_ints(_READ_REQ, 0, seq, address, rmr_context, length, reads_done)


def _header(kind: Dtos, first: int, wqes: list[PlainWqe], total: int) -> bytes:
    """The header of the frame carrying ``wqes`` (``first`` on, ``total`` bytes): SENDS for
    Sends, WRITE for a lone Write, WRITES for several."""
    if kind == Dtos.SEND:
        return encode_sends(first, [w[LENGTH] for w in wqes])
    if len(wqes) == 1:
        w = wqes[0]
        return encode_ints(_WRITE, w[LENGTH], first, w[R_ADDRESS], w[R_CONTEXT])
    return encode_write_rows(first, wqes, (R_ADDRESS, R_CONTEXT, LENGTH), total)
