"""The responder side of RDMA Reads and atomics (dat_ep_post_rdma_read, dat_ib_post_fetch_and_add
and _cmp_and_swap arriving at the target): read credits against max_rdma_read_in, the bytes a
Read may take, an atomic's read-modify-write, and their answers. A refused one is NAKed by the
target's ``refuse``, which breaks the connection."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final

from fabricd import _lanes as lanes
from fabricd.memory import MemoryRegistry
from fabricd.nic.lane import read_grants
from fabricd.nic.objects import Ep, PeerLink
from fabricd.nic.remote_access import atomic_target, readable
from fabricd.nic.wire import Wire
from proto.batch import MAX_OP_BYTES
from proto.codec import encode, encode_framed, encode_ints
from proto.constants import DtoCompletionStatus as St
from proto.errors import MalformedFrame, UnexpectedFrame
from proto.frames import MAX_HEADER_LEN, FrameType
from proto.hostif import ATOMIC_BYTES, Opcode

log = logging.getLogger("fabricd")
_U64: Final = (1 << 64) - 1
_READ_RESP: Final = int(FrameType.READ_RESP)
_READ_REQ: Final = int(FrameType.READ_REQ)


class Responder:
    """Serving the peer's RDMA Reads and atomics from this node's memory."""

    def __init__(
        self, wire: Wire, memory: MemoryRegistry, refuse: Callable[[PeerLink], None]
    ) -> None:
        self.wire = wire
        self.memory = memory
        self.refuse = refuse

    def _credited(self, link: PeerLink, seq: object, reads_done: object) -> Ep | None:
        """An incoming RDMA Read or atomic within max_rdma_read_in: its EP (None: refused)."""
        ep = link.ep
        if ep is None:
            raise UnexpectedFrame("RDMA Read or atomic request on a link with no endpoint")
        assert type(seq) is int
        link.reads_in += 1
        if type(reads_done) is not int or link.reads_in - reads_done > ep.attr.max_rdma_read_in:
            limit = ep.attr.max_rdma_read_in
            log.info(
                "EP %d: more incoming Reads/atomics than max_rdma_read_in=%d", ep.handle, limit
            )
            link.fault = (seq, St.DTO_ERR_REMOTE_RESPONDER)
            self.refuse(link)
            return None
        return ep

    def serve(self, link: PeerLink, view: memoryview, start: int, end: int) -> int:
        """The target's lane for a READ_REQ that is all that is left of the read and the
        link's next request (its ``acked`` + 1; lane.answer calls it): answered in C
        (_lanes.c's serve: a key whose checks passed before, lane.read_grants, a range inside
        it of at most MAX_OP_BYTES, within the read credits; no fault rules), its READ_RESP
        whole; or, for any other such Read, its header found in C (_lanes.c's request) and
        executed by ``read``, as the long way's Target.request would. Either READ_RESP leaves
        at once. Anything else, several requests in one read (their answers leave together
        the long way) or a duplicate, is the long way's. Returns where it stopped."""
        ep, seq = link.ep, link.acked + 1
        if ep is None:
            return start  # (lane._open: never)
        if not self.wire.faults.active:
            most = min(ep.attr.max_rdma_size, MAX_OP_BYTES)
            known = read_grants(self.memory, link)
            stop, frame = lanes.serve(
                view, start, end, seq, link.reads_in, ep.attr.max_rdma_read_in, most, known,
                _READ_REQ, _READ_RESP, MAX_HEADER_LEN,
            )  # fmt: skip
            if frame is not None:
                link.reads_in += 1
                self._answer(link, seq, frame)
                return stop
        stop, header = lanes.request(view, start, end, _READ_REQ, 7, MAX_HEADER_LEN)
        if header is None or stop != end or header[2] != seq:
            return start
        self.read(link, header[2:])
        return stop

    def read(self, link: PeerLink, fields: list[object]) -> None:
        """An RDMA Read request: its bytes go back in a READ_RESP."""
        seq, address, rmr_context, length, reads_done = fields
        ep = self._credited(link, seq, reads_done)
        if ep is None:
            return
        assert type(seq) is int
        view = readable(
            self.memory, ep, address, rmr_context, length, read_grants(self.memory, link)
        )
        if view is None:
            link.fault = (seq, St.DTO_ERR_REMOTE_ACCESS)
            self.refuse(link)
            return
        if len(view) <= MAX_OP_BYTES and not self.wire.faults.active:
            # copied now, the frame whole: one buffer to flush (the fault rules see the
            # header alone: with rules installed, the header and its view)
            self._answer(link, seq, encode_framed(view, _READ_RESP, seq))
        else:
            self._answer(link, seq, encode_ints(_READ_RESP, len(view), seq), [view])

    def _answer(
        self, link: PeerLink, seq: int, header: bytes, payload: Sequence[memoryview] = ()
    ) -> None:
        """Send the answer of request ``seq``, which acknowledges it and all before it."""
        self.wire.send(link, header, payload)
        link.acked, link.ack_due = seq, False

    def atomic(self, link: PeerLink, fields: list[object]) -> None:
        """dat_ib_post_fetch_and_add / cmp_and_swap at the target: the 8 bytes at ``address``
        (8-byte aligned, REMOTE_ATOMIC granted) are read, changed and written back in one step;
        the original value goes back to the initiator."""
        seq, address, rmr_context, opcode, operand, compare, reads_done = fields
        ep = self._credited(link, seq, reads_done)
        if ep is None:
            return
        assert type(seq) is int
        if any(type(v) is not int or not 0 <= v <= _U64 for v in (operand, compare)) or (
            opcode not in (Opcode.FETCH_ADD, Opcode.CMP_SWAP)
        ):
            raise MalformedFrame(f"atomic {opcode!r} of {operand!r}, {compare!r}")
        assert type(operand) is int and type(compare) is int
        target = atomic_target(self.memory, ep, address, rmr_context)
        if target is None:
            link.fault = (seq, St.DTO_ERR_REMOTE_ACCESS)
            self.refuse(link)
            return
        view, spans = target
        original = int.from_bytes(view, "little")
        if opcode == Opcode.FETCH_ADD:
            view[:] = ((original + operand) & _U64).to_bytes(ATOMIC_BYTES, "little")
        elif original == compare:
            view[:] = operand.to_bytes(ATOMIC_BYTES, "little")
        assert type(address) is int and type(rmr_context) is int
        if spans and not self.memory.store(spans):
            log.info("atomic at %#x: the buffer is gone from its process", address)
            link.fault = (seq, St.DTO_ERR_REMOTE_ACCESS)
            self.refuse(link)
            return
        if not self.memory.coherent:
            self.memory.mark_written(rmr_context, address, ATOMIC_BYTES)
        self._answer(link, seq, encode(FrameType.ATOMIC_RESP, seq, original))
