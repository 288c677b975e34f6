"""The RC initiator: request DTOs (Send, RDMA Write, RDMA Read, RMR bind, and the IB
extensions: atomics, RDMA Write with immediate data) from post to completion.

Requests start in posting order. An RDMA Read or atomic waits for a read credit
(max_rdma_read_out, as InfiniBand counts atomics with reads), a BARRIER_FENCE request for every
earlier read, and whatever was posted later waits too. A Write or Send is done when the
target's cumulative ACK covers it (or the answer of a later Read or atomic, which acknowledges
every request before it), a Read or atomic when its answer has landed, a bind when it
executed; completions leave in posting order, and a failed one breaks the EP."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from fabricd import _plaintake as plaintake
from fabricd.faults import FaultEngine
from fabricd.memory import Lmr, MemoryRegistry, Window
from fabricd.nic.cork import BATCHED, corked
from fabricd.nic.epdriver import EpDriver
from fabricd.nic.faultpath import decide_bind
from fabricd.nic.objects import Consumer, Ep, Op, PeerLink
from fabricd.nic.requests import ATOMICS, READ_LIKE, atomic_fits, done, request_frame
from fabricd.nic.runs import Run, expand, find, lone, queue, take_batch
from fabricd.nic.views import local_views
from fabricd.nic.wire import Wire
from proto.batch import MAX_BATCH_BYTES, MAX_OP_BYTES, MAX_OPS, encode_sends, encode_writes
from proto.constants import CompletionFlags, Dtos, MemPriv
from proto.constants import DtoCompletionStatus as St
from proto.constants import EpState as S
from proto.errors import DatError, DatInvalidParameter
from proto.hostif import OPCODE_DTOS, SLOTS, Opcode, Ring, Wqe
from proto.plainwqe import PLAIN_AT, PLAIN_REQUESTS, PlainWqe

log = logging.getLogger("fabricd")
# The per-request path's constants, each Final: compiled, a Final is a C static, where a
# module's name is a look-up in its dictionary at each use (an enum's member, an attribute
# read after it; a C function, ``plaintake.take``, the same). The frames are sent with their
# header and payload named, not ``send(link, *frame)``: compiled, a starred call is a generic
# one (an attribute look-up and a tuple), a named one calls the compiled method.
_FENCE: Final = int(CompletionFlags.BARRIER_FENCE)
_LOCAL_READ: Final = int(MemPriv.LOCAL_READ)  # what a Send or Write needs of its local segment
_PLAIN: Final = sum(1 << op for op in PLAIN_REQUESTS)  # plaintake.take's opcodes: a bit each
_READ_OPCODE: Final = int(Opcode.RDMA_READ)  # a WQE's first byte (proto.hostif.WQE)
_READ: Final = 1 << _READ_OPCODE
_LOCAL_WRITE: Final = int(MemPriv.LOCAL_WRITE)  # what a Read needs of its local segment
_plaintake_take: Final = plaintake.take
_CONNECTED: Final = S.CONNECTED
_DISCONNECT_PENDING: Final = S.DISCONNECT_PENDING
_SUCCESS: Final = St.DTO_SUCCESS
_RDMA_WRITE: Final = Dtos.RDMA_WRITE
_BIND_MW: Final = Dtos.BIND_MW


class Initiator:
    """Posting, starting and retiring request DTOs."""

    def __init__(
        self,
        node: str,
        wire: Wire,
        eps: EpDriver,
        memory: MemoryRegistry,
        faults: FaultEngine,
        now: Callable[[], float],
    ) -> None:
        self.node = node
        self.wire = wire
        self.eps = eps
        self.memory = memory
        self.faults = faults
        self.now = now
        self.retired: Callable[[Ep], None] = lambda ep: None  # the intake's look (Nic wires it)
        self.emptying: Callable[[Ep], None] = lambda ep: None  # ...and its POLL (Nic wires it)

    def post(self, consumer: Consumer, ep: Ep, wqe: Wqe, stage: memoryview) -> None:
        """dat_ep_post_send / rdma_write / rdma_read, dat_ib_post_fetch_and_add /
        cmp_and_swap / rdma_write_immed: a WQE the driver checked and queued, taken off the
        EP's send queue (the caller transmits once it has taken every WQE, so small Writes
        leave batched). A STAGED one's bytes are sent from ``stage``, the EP's staging area,
        once its segments pass their checks."""
        dto = OPCODE_DTOS[wqe.opcode]
        cookie, flags, operands = wqe.cookie, wqe.flags, wqe.operands
        status = St.DTO_ERR_LOCAL_PROTECTION
        try:
            need = MemPriv.LOCAL_WRITE if dto in READ_LIKE else MemPriv.LOCAL_READ
            views, length, spans = local_views(self.memory, consumer, ep.pz, wqe.segments, need)
            op = Op(
                dto, cookie, flags, 0, length, views, False, spans, wqe.remote, operands=operands
            )
            if dto in ATOMICS and not atomic_fits(op):
                status = St.DTO_ERR_LOCAL_LENGTH
                raise DatInvalidParameter(message="an atomic takes 8 bytes at both ends")
            if wqe.stage is not None:
                op.views, op.spans = [stage[wqe.stage : wqe.stage + length]], []
            elif spans and dto not in READ_LIKE and not self.memory.fetch(spans):
                raise DatInvalidParameter(message="the local buffer is gone from its process")
        except DatError as err:
            # as on hardware: this DTO fails at once and the connection breaks: the requests
            # still outstanding before it are flushed first (completions keep posting order;
            # it is done, so the flush gives it its own error), then it, then what follows
            log.info("EP %d: local check failed: %s", ep.handle, err)
            failed = Op(dto, cookie, flags, 0, 0, [], True, status=status, operands=operands)
            self.transmit(ep)  # what was posted before it leaves first
            if ep.ops and ep.state in (S.CONNECTED, S.DISCONNECT_PENDING):
                ep.ops.append(failed)
            else:
                self.eps.complete(ep, failed, status)
            if ep.state in (S.CONNECTED, S.DISCONNECT_PENDING):
                self.eps.broken(ep, notify_peer=True)
            return
        if dto == Dtos.RDMA_READ:
            op.length = op.remote[1]
        self.enqueue(ep, op, start=False)

    def post_plain(self, ep: Ep, sq: Ring, stage: memoryview) -> tuple[int, bool]:
        """``post`` for a run of the common WQE (proto/plainwqe.py) at the head of the EP's
        send queue, read and checked in C (fabricd/_plaintake.c), taken off it together and
        queued as one runs.Run (or several: one per kind, and an Op for each Write or Send too
        large to batch; one taken alone while none is outstanding goes on the wire at once,
        runs.lone: window-1 64 B Writes 69-76 -> 66-68 us, `fabricctl bench --mode lat`, four
        interleaved pairs; so does an RDMA Read at the head then, ``_lone_read``); how many,
        and whether it stopped before a WQE it does not take: one not common, whose segment
        fails a check (``post`` gives the error) or whose bytes are a process's own memory to
        fetch. Nothing it takes can break the EP or change its state."""
        link = ep.link
        if ep.state != _CONNECTED or link is None:
            return 0, True  # ``post`` takes each: ``enqueue`` completes it alone
        taken = 0
        lmr: Lmr | None = None
        lmrs, owner, pz, size = self.memory.by_lmr_context, ep.consumer.id, ep.pz, sq.entry_size
        while count := sq.available():
            first = sq.mine & sq.mask
            n = min(count, sq.entries - first)  # to the ring's end: the rest is the next stretch
            at = SLOTS + first * size
            if not ep.ops and sq.view[at] == _READ_OPCODE and not self.faults.active:
                if not self._lone_read(ep, link, sq, at, stage):
                    return taken, True
                taken += 1
                continue
            wqes, views, total, mixed, lmr = _plaintake_take(
                sq.view, at, n, size, _PLAIN, lmrs, owner, pz, _LOCAL_READ, lmr, stage
            )
            if took := len(wqes):
                if took == 1 and not ep.ops and not mixed and not self.faults.active:
                    header, payload = lone(ep, wqes[0], views[0])
                    self.wire.send(link, header, payload)  # at once
                else:
                    queue(ep, wqes, views, total, mixed)
                sq.publish(took)
                taken += took
            if took < n:
                return taken, True
        return taken, False

    def _lone_read(self, ep: Ep, link: PeerLink, sq: Ring, at: int, stage: memoryview) -> bool:
        """``post`` for an RDMA Read posted while none of the EP's requests is outstanding (a
        request-reply consumer's next Read), when it is the common WQE but for its opcode (one
        segment in the daemon's view with LOCAL_WRITE, unstaged: _plaintake.c's checks): a
        Run of its own (runs.lone) whose READ_REQ goes on the wire at once (nothing holds it
        back: no Read in flight, no fence to wait for), its completion a row (``retire``).
        False: not such a Read, nothing taken (``post`` takes it). With its answer through
        the initiator's lane (lane.acks), window-1 64 B Reads 89-91 -> 75-78 us (`fabricctl
        bench --mode lat`, four interleaved pairs)."""
        lmrs, owner, size = self.memory.by_lmr_context, ep.consumer.id, sq.entry_size
        wqes, views, _, _, _ = _plaintake_take(
            sq.view, at, 1, size, _READ, lmrs, owner, ep.pz, _LOCAL_WRITE, None, stage
        )
        if not wqes or wqes[0][1]:  # none, or staged (a Read's bytes land in its segment)
            return False
        sq.publish(1)
        header, payload = lone(ep, wqes[0], views[0])
        self.wire.send(link, header, payload)
        return True

    def enqueue(self, ep: Ep, op: Op, start: bool = True) -> None:
        """Queue a request in posting order; it starts once nothing holds it back (``start``)."""
        if ep.state != S.CONNECTED or ep.link is None:
            # an EP that cannot carry it (a WQE written past the library's state check, or
            # racing dat_ep_disconnect): this request alone completes, with no sequence number;
            # what was outstanding before it, and the receives, are not its to flush
            status = St.DTO_ERR_FLUSHED if ep.state == S.DISCONNECTED else St.DTO_ERR_LOCAL_EP
            self.eps.complete(ep, op, status)
            return
        if op.kind != Dtos.BIND_MW:
            op.seq = ep.next_seq
            ep.next_seq += 1
        ep.ops.append(op)
        ep.held.append(op)
        if start:
            self.transmit(ep)

    def _blocked(self, ep: Ep, op: Op) -> bool:
        """Must ``op`` wait for RDMA Reads in flight (a fence, or no read credit)?"""
        return bool(ep.reads_out) and bool(
            op.flags & CompletionFlags.BARRIER_FENCE
            or (op.kind in READ_LIKE and ep.reads_out >= ep.attr.max_rdma_read_out)
        )

    def _refresh(self, op: Op) -> None:
        """A fenced Write or Send from a process's own memory is read from the process again
        as it starts: the Reads it waited for may have written there since it was posted,
        through another LMR's mirror. (Unfenced, the bytes read at post are the ones to send.)"""
        fenced = op.flags & _FENCE
        if fenced and op.spans and op.kind not in READ_LIKE and not self.memory.fetch(op.spans):
            log.info("a fenced DTO's buffer is gone from its process: its posted bytes are sent")

    def transmit(self, ep: Ep, retire: bool = True) -> None:
        """Start held requests in order, as far as fences and read credits allow; then retire
        what is done (not ``retire``: only plain requests came, done by their answers alone;
        nor while the oldest outstanding awaits its answer, as a Read just posted does: none
        can retire before it. Window-1 64 B Reads, `python -m bench.ab`: 114 -> 110 us)."""
        link = ep.link
        while ep.held and link is not None and ep.link is link:
            op = ep.held[0]
            if isinstance(op, Run):  # small, unfenced: never blocked
                if self.faults.active:
                    expand(ep)  # the fault rules see single frames
                elif not corked(ep, op.first + op.sent):
                    header, payload = take_batch(ep)
                    self.wire.send(link, header, payload)
                    continue
                else:
                    break
                continue
            if self._blocked(ep, op):
                break
            self._refresh(op)
            if op.kind in BATCHED and op.length <= MAX_OP_BYTES and not self.faults.active:
                if corked(ep, op.seq):
                    break
                self._start_batch(ep, link)
                continue
            ep.held.popleft()
            if op.kind == _BIND_MW:
                self._bind(ep, op)
                if op.status != _SUCCESS:
                    break
            else:
                self._start(ep, link, op)
        # a fault rule may fail one on its way out; else only a done oldest lets any retire
        if self.faults.active or (retire and (not ep.ops or done(ep, ep.ops[0]))):
            self.retire(ep)

    def _start_batch(self, ep: Ep, link: PeerLink) -> None:
        """Put the small RDMA Writes (or Sends) at the head of the queue on the wire, as one
        WRITES (SENDS) frame when there are several; a lone small Send as a SENDS frame too (the
        target lands those in its receives as a run: Target._sends). proto.batch; the fault
        rules see single frames: no batching while rules are installed."""
        held = ep.held
        first = held.popleft()
        assert not isinstance(first, Run)  # transmit's word
        batch, kind, total, seq = [first], first.kind, first.length, first.seq
        reads = ep.reads_out  # none in flight: nothing can be blocked (the common batch)
        while held and len(batch) < MAX_OPS:
            op = held[0]
            seq += 1
            if (
                isinstance(op, Run)
                or op.kind != kind
                or op.length > MAX_OP_BYTES
                or total + op.length > MAX_BATCH_BYTES
                or op.seq != seq
                or (reads and self._blocked(ep, op))
            ):
                break
            if op.flags & _FENCE:
                self._refresh(op)
            held.popleft()
            batch.append(op)
            total += op.length
        if len(batch) == 1 and kind != Dtos.SEND:
            self._start(ep, link, first)
            return
        if kind == Dtos.SEND:
            hdr = encode_sends(first.seq, [op.length for op in batch])
        else:
            hdr = encode_writes(
                first.seq, [(op.remote[0], op.remote[2], op.length) for op in batch]
            )
        self.wire.send(link, hdr, [view for op in batch for view in op.views])

    def _start(self, ep: Ep, link: PeerLink, op: Op) -> None:
        """Put one request on the wire (a Read or atomic takes a read credit)."""
        if op.kind in READ_LIKE:
            ep.reads_out += 1
        header, payload = request_frame(op, ep.reads_done)
        self.wire.send(link, header, payload)

    def _bind(self, ep: Ep, op: Op) -> None:
        """Execute a bind: the window's previous key dies, the promised one starts to work."""
        bind = op.bind
        assert bind is not None
        bind.rmr.unbind(self.memory)
        op.done = True
        if self.faults.active and ep.link is not None:  # a bind fault: it fails at execution
            status = decide_bind(
                self.faults, self.node, ep.link, bind.region.length, bind.key, self.now()
            )
            if status is not None:
                op.status = status
                return
        lmr = bind.lmr
        if lmr is None:
            return
        if self.memory.by_lmr_context.get(lmr.lmr_context) is not lmr:
            op.status = St.RMR_OPERATION_FAILED  # the LMR went away
            return
        self.memory.bind(bind.key, Window(bind.region, lmr, ep.handle if bind.rmr.for_ep else 0))
        bind.rmr.context, bind.rmr.lmr, bind.rmr.region = bind.key, lmr, bind.region

    def retire(self, ep: Ep) -> None:
        """Complete, in posting order, every request at the head of the queue that is done
        (runs of successful DTOs together: their completions are written at once, the rows
        of consecutive Runs of one kind in one write)."""
        ops = ep.ops
        if ops and not ep.held and done(ep, ops[-1]):
            self.emptying(ep)  # the last one is done: POLL 1 first, its next post rings nothing
        succeeded: list[Op] = []  # (list[Op]() builds a generic alias each call: ~1 us)
        rows: list[PlainWqe] = []  # of the Runs since the last Op, all of ``kind``
        kind = _RDMA_WRITE  # read only once ``rows`` holds some
        while ops:
            op = ops[0]
            if isinstance(op, Run):  # a Run's requests are done as the ACK covers them
                lo, end = op.done, len(op.wqes)
                hi = min(end, ep.acked - op.first + 1)
                if hi <= lo:
                    break
                if succeeded:  # what finished before it, first
                    self.eps.complete_run(ep, succeeded)
                    succeeded = []
                if rows and op.kind != kind:
                    self.eps.events.rows_done(ep, kind, rows, PLAIN_AT)
                    rows = []
                kind, op.done = op.kind, hi
                if rows:  # a slice of an earlier Run's: this retire's own list
                    rows += op.wqes[lo:hi]
                else:
                    rows = op.wqes[lo:hi]
                if hi < end:
                    break
                ops.popleft()
                continue
            if not done(ep, op):
                break
            if rows:  # the Runs before it, first
                self.eps.events.rows_done(ep, kind, rows, PLAIN_AT)
                rows = []
            if op.status == _SUCCESS and op.kind != _BIND_MW:
                ops.popleft()
                succeeded.append(op)
                continue
            self.eps.complete_run(ep, succeeded)  # what finished before it, first
            succeeded = []
            if op.status != _SUCCESS:
                self.eps.broken(ep, first_status=op.status, notify_peer=True)
                return
            ops.popleft()
            self.eps.complete(ep, op, _SUCCESS)
        if rows:
            self.eps.events.rows_done(ep, kind, rows, PLAIN_AT)
        if succeeded:
            self.eps.complete_run(ep, succeeded)
        if ep.state == _DISCONNECT_PENDING:
            self.eps.drained(ep)
        self.retired(ep)

    def fail(self, link: PeerLink, seq: int | None, status: St) -> None:
        """The request ``seq`` is done, with an error: it breaks the EP when it retires."""
        op = find(link.ep, seq) if link.ep is not None else None
        if op is not None:
            op.done, op.status = True, status

    def ack(self, ep: Ep, seq: int) -> None:
        """Every request up to ``seq`` (one that was sent) was executed."""
        if seq > ep.acked:
            ep.acked = seq
            if ep.held:
                self.transmit(ep)  # what was corked leaves; then the done requests retire
            else:
                self.retire(ep)  # transmit's end, with nothing to start
