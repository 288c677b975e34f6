"""The RC target: incoming RDMA Writes, RDMA Read requests, Sends, atomics and RDMA Writes with
immediate data, and the receive queue.

Payloads land straight in registered memory (``sink``). Each request executes once, in stream
order (a duplicate or retry is answered again, never executed again); behind a Send or Write
with immediate data that found no receive (receiver not ready) every later frame waits until a
receive is posted. An atomic runs whole within one step of the daemon's single thread, so no
other atomic or RDMA access through this daemon sees it half done. One cumulative ACK answers
what one read from the stream executed, unless a READ_RESP or ATOMIC_RESP (which acknowledges
its request and everything before it) already did. A refused request is NAKed and breaks the
connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from fabricd import _receives as receives
from fabricd.memory import MemoryRegistry
from fabricd.nic import lane, plain_recvs
from fabricd.nic.epdriver import EpDriver
from fabricd.nic.events import Events
from fabricd.nic.objects import Ep, PeerLink, Recv
from fabricd.nic.remote_access import direct_writes, stored, stored_writes, write_targets
from fabricd.nic.responder import Responder
from fabricd.nic.send_run import SendRun, in_receives
from fabricd.nic.views import local_views, scatter, truncate, truncate_spans
from fabricd.nic.wire import Wire
from proto.batch import parse_sends, parse_writes
from proto.codec import DISCARD, Frame, Sink, encode, encode_ints
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, MemPriv
from proto.constants import EpState as S
from proto.errors import DatError, MalformedFrame
from proto.events import RECEIVED_AT
from proto.frames import FrameType
from proto.hostif import Ring

log = logging.getLogger("fabricd")
LANDS: Final = frozenset(
    {FrameType.WRITE, FrameType.WRITES, FrameType.SEND, FrameType.SENDS, FrameType.WRITE_IMM}
)  # the request frames whose payload ``Target.sink`` lands (the hub routes them here)
_CONSUMES_RECEIVE: Final = frozenset({FrameType.SEND, FrameType.WRITE_IMM})


class Target:
    """Executing the peer's requests against this node's memory and receive queues."""

    def __init__(self, wire: Wire, eps: EpDriver, events: Events, memory: MemoryRegistry) -> None:
        self.wire = wire
        self.eps = eps
        self.events = events
        self.memory = memory
        self.responder = Responder(wire, memory, self._refuse)
        # set by the hub: take the receives posted unannounced; hear that a frame waits
        self.fetch: Callable[[Ep], None] = lambda ep: None
        self.stalled: Callable[[Ep], None] = lambda ep: None
        self._fetching: PeerLink | None = None  # whose message is fetching a receive

    # -- payloads ------------------------------------------------------------------------------

    def sink(self, link: PeerLink, frame: Frame) -> Sink:
        """Where a request's payload lands (None: collect it, the stream is stalled)."""
        if frame.type == FrameType.WRITES:
            parse_writes(frame)
        elif frame.type == FrameType.SENDS:
            parse_sends(frame)
        if link.seen(frame) or link.ep is None:
            return DISCARD
        if link.stalled or frame.type == FrameType.SENDS:  # a batch of Sends: see _sends
            return None
        if frame.type == FrameType.WRITES:  # into a C program: collected, then stored straight
            link.direct = direct_writes(
                self.memory, link, link.ep, frame.payload_len, *parse_writes(frame)
            )
            if link.direct is not None:
                return None
        return self._landing(link, frame)

    def _landing(self, link: PeerLink, frame: Frame) -> Sink:
        ep = link.ep
        if ep is None:
            return DISCARD
        seq = frame.fields[0]
        assert type(seq) is int
        if frame.type == FrameType.WRITES:
            return write_targets(self.memory, link, ep, seq, parse_writes(frame)[1])
        if frame.type in _CONSUMES_RECEIVE:
            if not self._has_receive(link, ep):
                return None  # receiver not ready: hold the payload, stall the stream
            recv = self._take_receive(ep)
        if frame.type in (FrameType.WRITE, FrameType.WRITE_IMM):
            address, rmr_context = frame.fields[1:3]
            if type(address) is not int or type(rmr_context) is not int:
                raise MalformedFrame("an RDMA Write's address and rmr_context are integers")
            reach = self.memory.reach(rmr_context, MemPriv.REMOTE_WRITE, ep.pz, ep.handle)
            view = None if reach is None else reach.bytes(address, frame.payload_len)
            if view is None or reach is None:
                link.fault = (seq, St.DTO_ERR_REMOTE_ACCESS)
                return DISCARD
            if not self.memory.coherent:
                self.memory.mark_written(rmr_context, address, frame.payload_len)
            elif frame.type == FrameType.WRITE:
                lane.grant(self.memory, link, ep, rmr_context, reach)  # the next may take it
            return [view]
        if frame.type != FrameType.SEND:
            raise MalformedFrame(f"{frame.type.name} carries no payload")
        if frame.payload_len > recv.capacity:
            link.fault = (seq, St.DTO_ERR_LOCAL_LENGTH)
            return DISCARD
        return truncate(recv.views, frame.payload_len)

    # -- requests ------------------------------------------------------------------------------

    def request(self, link: PeerLink, frame: Frame) -> None:
        """A request frame (objects.REQUESTS, WRITES, SENDS) whose payload (if any) has been
        read."""
        if frame.payload is None and link.seen(frame):
            link.ack_due = True  # answer it again; do not execute it again
            return
        if frame.type == FrameType.SENDS:
            self._sends(link, frame)
            return
        if frame.type == FrameType.WRITES and link.direct is not None:
            self._direct(link, frame)
            return
        ep = link.ep
        not_ready = (
            frame.type in _CONSUMES_RECEIVE
            and ep is not None
            and ep.taking is None  # (taken by this message as its payload began to land)
            and not self._has_receive(link, ep)
        )
        if link.stalled or frame.payload is not None or not_ready:  # receiver not ready
            link.stalled.append(frame)
            if ep is not None:
                self.stalled(ep)  # no lingering while frames wait (a receive posted must ring)
            # a receive may have cleared the stall while this payload was still arriving
            self._run_stalled(link)
        else:
            self._execute(link, frame)

    def _sends(self, link: PeerLink, frame: Frame) -> None:
        """A SENDS frame, its bytes collected: each Send in turn, as if it had come alone (a
        Send seen before is answered again, one without a receive stalls the rest). A run of
        Sends that land at once completes together (SendRun, Events.rows_done)."""
        seq, lengths = parse_sends(frame)
        if frame.payload is None:
            return  # no endpoint: nothing to receive them
        payload, offset, run, i = memoryview(frame.payload), 0, SendRun(seq), 0
        while i < len(lengths):
            if (ep := link.ep) is not None and in_receives(link, ep, seq + i):
                land = (frame.payload, offset, lengths, i, ep.recvs, run.done, run.recvs,
                        run.bodies)  # fmt: skip
                if not ep.recvs[0].spans:  # as many as land in common receives, in C
                    i, offset = receives.sends(*land)
                else:  # or in a C program's receives: planned, written when the run ends
                    i, offset, run.pid = receives.planned(*land, run.pid, run.pieces)
                if i == len(lengths):
                    break
            length, this = lengths[i], seq + i
            at, offset, i = offset, offset + length, i + 1
            body = payload[at:offset]
            if run.done and (link.ep is None or not link.ep.recvs):
                self._received(link, frame.payload, run)  # before a fetch, which may complete
                run = SendRun(this)  # or flush receives itself
            if not link.stalled and self._landed(link, this, body, at, run):
                continue
            self._received(link, frame.payload, run)
            run = SendRun(this + 1)
            send = Frame(FrameType.SEND, [this], length, body)
            if link.seen(send):
                link.ack_due = True
            else:
                self.request(link, send)
        self._received(link, frame.payload, run)

    def _landed(self, link: PeerLink, seq: int, body: memoryview, at: int, run: SendRun) -> bool:
        """A Send of a batch (the payload's bytes [at, +len)) as request() runs it when nothing
        holds it back (a fresh sequence number, no fault, a receive of the EP's own that holds
        it): taken by ``run``, its completion to be written with the run's. False: request()
        takes it."""
        ep = link.ep
        if ep is None or link.fault is not None or seq <= link.acked or ep.taking is not None:
            return False
        if ep.srq is not None or not (ep.recvs or self._has_receive(link, ep)):
            return False
        recv = ep.recvs[0]
        if len(body) > recv.capacity or not run.take(recv, body, at):
            return False  # refused, or a receive the general path stores
        ep.recvs.popleft()
        return True

    def _received(
        self, link: PeerLink, payload: bytes | bytearray | memoryview, run: SendRun
    ) -> None:
        """The Sends of ``run`` landed in their receives: their bytes for a C program's
        receives are written, then they complete and are acknowledged. If that memory cannot
        be written, the run's receives are given back and its Sends go the general way (which
        completes those before the one that fails, and fails that one)."""
        ep = link.ep
        if not run.done or ep is None:
            return
        if run.pieces and not self.memory.write_payload(run.pid, run.pieces, payload):
            ep.recvs.extendleft(reversed(run.recvs))
            for i, body in enumerate(run.bodies):
                self.request(link, Frame(FrameType.SEND, [run.first + i], len(body), body))
            return
        self.events.rows_done(ep, Dtos.RECEIVE, run.done, RECEIVED_AT)
        link.acked, link.ack_due = run.last, True

    def _execute(self, link: PeerLink, frame: Frame) -> None:
        """Carry out a request whose payload (if any) has landed."""
        if frame.type == FrameType.WRITE:
            seq, address, rmr_context = frame.fields
            if link.fault is None and not stored(
                self.memory, rmr_context, address, frame.payload_len
            ):
                link.fault = (seq, St.DTO_ERR_REMOTE_ACCESS)
            self._done(link, seq)
        elif frame.type == FrameType.WRITES:
            seq, ops = parse_writes(frame)
            stored_writes(self.memory, link, seq, ops)
            self._writes_done(link, seq + len(ops))
        elif frame.type == FrameType.READ_REQ:
            self.responder.read(link, frame.fields)
        elif frame.type == FrameType.ATOMIC:
            self.responder.atomic(link, frame.fields)
        elif frame.type == FrameType.WRITE_IMM:
            seq, address, rmr_context, immediate = frame.fields
            if type(immediate) is not int or not 0 <= immediate < 1 << 32:
                raise MalformedFrame(f"immediate data {immediate!r} is not a u32")
            if link.fault is None and not stored(
                self.memory, rmr_context, address, frame.payload_len
            ):
                link.fault = (seq, St.DTO_ERR_REMOTE_ACCESS)
            self._receive(link, frame, immediate)
        else:
            self._receive(link, frame)

    def _direct(self, link: PeerLink, frame: Frame) -> None:
        """A WRITES batch collected for a C program's memory (sink): its bytes go straight
        there; if a key was revoked while they came or a piece cannot be written, the batch
        lands as any other instead, each Write through its checks, and the first that cannot
        be stored fails (stored_writes)."""
        assert link.direct is not None and frame.payload is not None
        plan, link.direct = link.direct, None
        seq, ops = parse_writes(frame)
        if self.memory.store_payload(plan, frame.payload):
            self._writes_done(link, seq + len(ops))
            return
        self._land_and_execute(link, frame)

    def _writes_done(self, link: PeerLink, end: int) -> None:
        """A WRITES batch up to ``end`` (exclusive) executed but from its fault, if it has one:
        the Writes before that are acknowledged, that one is refused."""
        failed = link.fault[0] if link.fault is not None else end
        link.acked = max(link.acked, failed - 1)
        link.ack_due = True
        if failed < end:
            self._refuse(link)

    def _done(self, link: PeerLink, seq: object) -> None:
        if link.fault is not None:
            self._refuse(link)
            return
        assert type(seq) is int
        link.acked = seq
        link.ack_due = True

    def _refuse(self, link: PeerLink) -> None:
        """NAK the request that failed here; the connection breaks."""
        assert link.fault is not None
        seq, status = link.fault
        link.fault = None
        self.wire.send(link, encode(FrameType.NAK, seq, status))
        if link.ep is not None:
            self.eps.broken(link.ep)
        else:
            self.wire.drop(link, "remote access error")

    def _has_receive(self, link: PeerLink, ep: Ep) -> bool:
        """Whether a receive waits for the next message: one taken already, or one the driver
        published that no doorbell announced yet, taken now (as a NIC fetches the next receive
        WQE when a message arrives: a Send that finds one in the ring is no RNR)."""
        if not ep.recvs and self._fetching is None:
            self._fetching = link  # the receives it takes release no other frame of this link
            try:
                self.fetch(ep)
            finally:
                self._fetching = None
        return bool(ep.recvs)

    def _take_receive(self, ep: Ep) -> Recv:
        """The first receive, taken for the message that starts landing in (or consuming) it:
        no message on another EP of the same SRQ can pick it meanwhile; until the message is
        done it is the EP's (``taking``: flushed with the EP's receives if the EP breaks)."""
        recv = ep.taking = ep.recvs.popleft()
        if ep.srq is not None:
            self.events.srq_low(ep.srq)
            self.eps.watermarks(ep)  # it took a buffer from the SRQ
        return recv

    def _receive(self, link: PeerLink, frame: Frame, immediate: int | None = None) -> None:
        """A Send lands in the first receive; a Write with ``immediate`` data (its bytes
        already stored) consumes the receive and completes it with the immediate."""
        ep = link.ep
        if ep is None:
            return  # the payload was discarded: no endpoint to receive it
        if immediate is not None and link.fault is not None:
            self._refuse(link)  # refused before it consumed anything: the receive is flushed
            return
        recv = ep.taking if ep.taking is not None else self._take_receive(ep)
        ep.taking = None
        if immediate is not None:
            length = frame.payload_len
            self.events.received(ep, recv.cookie, St.DTO_SUCCESS, length, immediate)
            self._done(link, frame.fields[0])
            return
        if link.fault is not None:
            self.events.received(ep, recv.cookie, St.DTO_ERR_LOCAL_LENGTH)
            link.fault = (link.fault[0], St.DTO_ERR_REMOTE_RESPONDER)
            self._refuse(link)
            return
        if recv.spans and not self.memory.store(truncate_spans(recv.spans, frame.payload_len)):
            log.info("EP %d: the receive buffer is gone from its process", ep.handle)
            self.events.received(ep, recv.cookie, St.DTO_ERR_LOCAL_PROTECTION)
            link.fault = (frame.fields[0], St.DTO_ERR_REMOTE_ACCESS)
            self._refuse(link)
            return
        self.events.received(ep, recv.cookie, St.DTO_SUCCESS, frame.payload_len)
        self._done(link, frame.fields[0])

    # -- the receive queue ---------------------------------------------------------------------

    def post_recv(self, ep: Ep, cookie: int, flags: int, local_iov: object) -> None:
        """dat_ep_post_recv: a receive buffer; it may release frames stalled behind it."""
        try:
            views, capacity, spans = local_views(
                self.memory, ep.consumer, ep.pz, local_iov, MemPriv.LOCAL_WRITE
            )
        except DatError as err:  # as a failed request DTO: the error, then the connection breaks
            log.info("EP %d: receive buffer refused: %s", ep.handle, err)
            self.events.received(ep, cookie, St.DTO_ERR_LOCAL_PROTECTION)
            self.eps.broken(ep, notify_peer=True)
            return
        if ep.state == S.DISCONNECTED:
            self.events.received(ep, cookie, St.DTO_ERR_FLUSHED)
            return
        ep.recvs.append(Recv(cookie, flags, views, capacity, spans))
        if ep.link is not None and ep.link.stalled:
            self.unstall(ep.link)

    def post_recv_plain(self, ep: Ep, rq: Ring) -> int:
        """``post_recv`` for a run of plain receives at the head of the EP's receive queue
        (plain_recvs.take); how many. None is taken by an EP of an SRQ or a DISCONNECTED one
        (``post_recv`` and the intake say what happens to those)."""
        if ep.srq is not None or ep.state == S.DISCONNECTED:
            return 0
        taken = plain_recvs.take(self.memory, ep, rq)
        if taken and ep.link is not None and ep.link.stalled:
            self.unstall(ep.link)
        return taken

    def unstall(self, link: PeerLink) -> None:
        """Run the frames held behind the Send that had no receive; ACK what ran (not those of
        the link whose message is fetching the receive: that message runs next)."""
        if link is self._fetching:
            return
        self._run_stalled(link)
        self.batch_end(link)

    def _run_stalled(self, link: PeerLink) -> None:
        """Run, in order, the held frames up to the next Send that finds no receive."""
        ep = link.ep
        while link.stalled and ep is not None and link.ep is ep:
            frame = link.stalled[0]
            if frame.type in _CONSUMES_RECEIVE and not self._has_receive(link, ep):
                break
            link.stalled.popleft()
            self._land_and_execute(link, frame)

    def _land_and_execute(self, link: PeerLink, frame: Frame) -> None:
        """A request whose payload was collected: it lands where it would have landed as it
        came (its checks made now), then executes."""
        if frame.payload_len:
            sink = self._landing(link, frame)
            if sink:
                scatter(frame.payload or b"", sink)
            frame.payload = None
        self._execute(link, frame)

    def batch_end(self, link: PeerLink) -> None:
        """After one read from the stream: one cumulative ACK for everything executed."""
        link.heard = True
        if link.ack_due and not link.closed:
            link.ack_due = False
            self.wire.send(link, encode_ints(FrameType.ACK, 0, link.acked))
