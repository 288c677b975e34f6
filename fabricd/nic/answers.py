"""The target's answers to the initiator's requests: a cumulative ACK, a READ_RESP's payload
(where it lands, then its landing), an ATOMIC_RESP (either response also acknowledges every
request up to its own), a NAK. Each is checked against the link's EP (an answer to a request
never sent is a MalformedFrame, which closes the link; a duplicate of an answer already taken
is dropped) and hands the EP back to the initiator, which starts what waited and retires what
is done (a NAK breaks the EP)."""

from __future__ import annotations

from fabricd.memory import MemoryRegistry
from fabricd.nic.epdriver import EpDriver
from fabricd.nic.initiator import Initiator
from fabricd.nic.objects import Ep, Op, PeerLink
from fabricd.nic.requests import ATOMICS
from fabricd.nic.runs import Run, expand, find
from fabricd.nic.views import truncate, truncate_spans
from proto.codec import DISCARD, Frame, Sink
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos
from proto.errors import MalformedFrame
from proto.hostif import ATOMIC_BYTES


class Answers:
    """ACK, READ_RESP, ATOMIC_RESP and NAK frames from the target, for the initiator."""

    def __init__(self, initiator: Initiator, eps: EpDriver, memory: MemoryRegistry) -> None:
        self.initiator = initiator
        self.eps = eps
        self.memory = memory

    def acked(self, link: PeerLink, frame: Frame) -> None:
        """ACK: every request up to ``seq`` was executed (cumulative)."""
        ep, seq = link.ep, frame.fields[0]
        if ep is None:
            return
        if type(seq) is not int or seq >= ep.next_seq:
            raise MalformedFrame(f"ACK of {seq!r}, which was never sent")
        _unanswered(ep, seq, "ACK")
        self.initiator.ack(ep, seq)

    def read_sink(self, link: PeerLink, frame: Frame) -> Sink:
        """Where a READ_RESP's payload lands: the RDMA Read's local buffers."""
        ep, seq = link.ep, frame.fields[0]
        if ep is None:
            return DISCARD
        op = find(ep, seq)
        if op is None and type(seq) is int and seq < ep.next_seq:
            return DISCARD  # a duplicate of a response already landed
        if op is None or op.kind != Dtos.RDMA_READ or frame.payload_len > op.length:
            raise MalformedFrame("read response matches no outstanding RDMA Read")
        return truncate(op.views, frame.payload_len)

    def read_landed(self, link: PeerLink, frame: Frame) -> None:
        """READ_RESP: its payload has landed in the RDMA Read's local buffers."""
        ep = link.ep
        op = find(ep, frame.fields[0]) if ep is not None else None
        if ep is None or op is None or op.done:
            return  # a duplicate (its sink was DISCARD)
        self.landed(ep, op, frame.payload_len)

    def landed(self, ep: Ep, item: Op | Run, length: int) -> None:
        """The answer of RDMA Read ``item`` landed, ``length`` bytes (``read_landed``; the
        initiator's lane, fabricd.nic.lane.acks, for the oldest outstanding one). A lone
        Read's Run (runs.lone) filled whole is done as the ACKs' Runs are: the EP's
        ``acked`` reaches it, its row completes it (Initiator.retire)."""
        if isinstance(item, Run):
            if length == item.nbytes:
                ep.acked = max(ep.acked, item.first)
                self._credit_returned(ep)
                return
            item = expand(ep)[0]  # a shorter answer: its length is the completion's
        item.length = length
        self._answered(ep, item)

    def atomic_answered(self, link: PeerLink, frame: Frame) -> None:
        """ATOMIC_RESP: the remote's original 8 bytes, into the atomic's local buffer."""
        ep, (seq, original) = link.ep, frame.fields
        if ep is None:
            return
        op = find(ep, seq)
        if op is None and type(seq) is int and seq < ep.next_seq:
            return  # a duplicate of an answer already taken
        if op is None or op.kind not in ATOMICS or type(original) is not int:
            raise MalformedFrame("atomic response matches no outstanding atomic")
        if not 0 <= original < 1 << 64:
            raise MalformedFrame(f"atomic response of {original!r}: not a u64")
        if op.done:
            return
        op.views[0][:ATOMIC_BYTES] = original.to_bytes(ATOMIC_BYTES, "little")
        self._answered(ep, op)

    def _answered(self, ep: Ep, op: Op) -> None:
        """A Read's or atomic's answer landed in its local buffer: it is done, its read
        credit comes back, and it acknowledges every request up to its own (RC executes
        them in order)."""
        op.done = True
        ep.acked = max(ep.acked, op.seq)
        if op.spans and not self.memory.store(truncate_spans(op.spans, op.length)):
            op.status = St.DTO_ERR_LOCAL_PROTECTION  # its process's buffer is gone
        self._credit_returned(ep)

    def _credit_returned(self, ep: Ep) -> None:
        """An answered Read's or atomic's credit comes back: what waited for it starts, what
        is done retires (Initiator.transmit)."""
        ep.reads_out -= 1
        ep.reads_done += 1
        self.initiator.transmit(ep)

    def nak(self, link: PeerLink, frame: Frame) -> None:
        """NAK: the target refused request ``seq``; everything before it was executed."""
        ep, (seq, status) = link.ep, frame.fields
        if ep is None:
            return
        try:
            status = St(status)
        except ValueError:
            raise MalformedFrame(f"NAK with unknown status {status!r}") from None
        if type(seq) is int and seq - 1 > ep.acked:
            _unanswered(ep, seq - 1, "NAK")
            ep.acked = seq - 1
            self.initiator.retire(ep)
        self.eps.broken(ep, first_status=status)


def _unanswered(ep: Ep, seq: int, what: str) -> None:
    """An answer that acknowledges requests up to ``seq`` while a lone RDMA Read among them
    (a Run: runs.lone, always the oldest) has had none: the target executes in order, so its
    READ_RESP came first; taken, the ACK would complete the Read without its bytes."""
    head = ep.ops[0] if ep.ops else None
    if type(head) is Run and head.kind == Dtos.RDMA_READ and seq >= head.first:
        raise MalformedFrame(f"{what} of {seq} before the answer of RDMA Read {head.first}")
