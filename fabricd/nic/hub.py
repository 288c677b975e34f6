"""The NIC's hub: it builds the rooms and routes every frame to one of them.

One table of consumer calls (method -> its argument record and handler; the record is parsed
before the handler runs) and one table of peer frame handlers. A DatError from a handler is the
call's DAT_RETURN; anything else is a bug of the daemon, logged with its traceback and answered
with DAT_INTERNAL_ERROR."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import partial

from fabricd.faults import FaultEngine
from fabricd.memory import MemoryRegistry, SegmentMapper
from fabricd.nic import lane
from fabricd.nic.admin import Admin
from fabricd.nic.answers import Answers
from fabricd.nic.cm import ConnectionManager
from fabricd.nic.ep import Endpoints
from fabricd.nic.epdriver import EpDriver
from fabricd.nic.evds import EventQueues
from fabricd.nic.events import Events
from fabricd.nic.initiator import Initiator
from fabricd.nic.intake import Intake
from fabricd.nic.links import Links, check_hello
from fabricd.nic.lmr import Registrations
from fabricd.nic.objects import (
    Channel,
    Consumer,
    Ep,
    Handles,
    Listeners,
    PeerLink,
    Shell,
)
from fabricd.nic.queues import Queues
from fabricd.nic.rmr import Windows
from fabricd.nic.routes import Route, route, within_quota
from fabricd.nic.srq import Srqs
from fabricd.nic.target import LANDS, Target
from fabricd.nic.wire import Wire
from fabricd.procmem import ProcessMemory
from proto import calls
from proto.codec import DISCARD, Frame, FrameReader, Sink, encode, hello
from proto.errors import (
    DatError,
    DatInternalError,
    DatModelNotSupported,
    MalformedFrame,
    PeerRefused,
    ResourceRefused,
    UnexpectedFrame,
)
from proto.frames import ROLE_ADMIN, ROLE_CONSUMER, ROLE_PEER, FrameType
from proto.limits import Limits
from proto.schema import Empty

log = logging.getLogger("fabricd")

PeerHandler = Callable[[PeerLink, Frame], None]


class Nic:
    """The per-node simulated NIC."""

    def __init__(
        self,
        name: str,
        address: tuple[str, int],
        shell: Shell,
        mapper: SegmentMapper,
        random_u32: Callable[[], int],
        coherent: bool = True,
        heartbeat: tuple[float, float] = (1.0, 3.0),
        process: ProcessMemory | None = None,
        cluster_key: bytes | None = None,
        nonce: Callable[[], bytes] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.name = name
        self.address = address
        self.shell = shell
        self.pid = 0  # set by the shell, for fabricctl node pause/resume
        self.heartbeat_interval = heartbeat[0]
        self.consumers: dict[int, Consumer] = {}
        self.limits = limits = limits or Limits()
        self.faults, handles = FaultEngine(), Handles()
        peer_names: dict[str, str] = {}
        self.memory = MemoryRegistry(mapper, random_u32, coherent, process)
        self.events = Events(shell.call_soon, shell.call_idle, self.memory)
        self.evds = EventQueues(self.memory, self.events)
        self.wire = Wire(name, shell, self.faults)
        self.listeners = Listeners()
        self.eps = EpDriver(
            self.wire, self.events, self.memory, self.listeners, Queues(self.memory)
        )
        self.initiator = Initiator(name, self.wire, self.eps, self.memory, self.faults, shell.now)
        self.answers = Answers(self.initiator, self.eps, self.memory)
        self.target = Target(self.wire, self.eps, self.events, self.memory)
        self.intake = Intake(self.memory, self.initiator, self.target, self.eps, shell)
        self.srqs = Srqs(self.memory, self.eps, self.events, self.target, handles)
        self.target.fetch = self._fetch_receives
        self.initiator.retired, self.initiator.emptying = self.intake.retired, self.intake.emptying
        self.target.stalled = self.intake.look
        # a peer stream's read: its lanes (lone Writes or Read requests, answered at once if
        # they are all of it; then ACKs or a Read's answer) before its frames are decoded
        self.peer_answer: Callable[[PeerLink, FrameReader, Callable[[], None]], bool]
        self.peer_answer = partial(lane.answer, self.memory, self.target.responder.serve)
        self.peer_lane: Callable[[PeerLink, FrameReader], None]
        self.peer_lane = partial(lane.take_acks, self.initiator.ack, self.answers.landed)
        self.peer_batch_end: Callable[[PeerLink], None] = self.target.batch_end
        self.links = Links(
            self.wire,
            self.eps,
            self._hello_name,
            handles,
            peer_names,
            heartbeat,
            limits,
            cluster_key,
            nonce or (lambda: b"".join(random_u32().to_bytes(4, "little") for _ in range(4))),
        )
        self.connections = ConnectionManager(
            shell, self.wire, self.eps, self.events, self.listeners, handles, peer_names, limits
        )
        self.regs = Registrations(self.memory, handles, name, lambda: self.address_text, limits)
        self.windows = Windows(self.memory, self.initiator, handles)
        self.endpoints = Endpoints(self.eps, handles)
        self.admin = Admin(self.faults, self.wire, self.memory, shell, self._status)
        self.wire.on_fail = self.initiator.fail
        self.wire.on_reset = self.links.reset
        self._new_handle = handles
        self.calls = self._call_table()
        self.admin_calls = self._admin_table()
        self.peer_frames = self._peer_table()

    def _call_table(self) -> dict[str, Route]:
        regs, win, ep, cm, evd, srq = (
            self.regs,
            self.windows,
            self.endpoints,
            self.connections,
            self.evds,
            self.srqs,
        )
        return {
            "ia_query": route(Empty, regs.ia_query),
            "pz_create": route(Empty, regs.pz_create),
            "pz_free": route(calls.PzFree, regs.pz_free),
            "lmr_create": route(calls.LmrCreate, regs.lmr_create),
            "lmr_free": route(calls.LmrFree, regs.lmr_free),
            "shared_attach": route(calls.SharedAttach, regs.shared_attach),
            "lmr_sync": route(calls.LmrSync, regs.lmr_sync),
            "rmr_create": route(calls.RmrCreate, win.rmr_create),
            "rmr_create_for_ep": route(calls.RmrCreate, win.rmr_create_for_ep),
            "rmr_bind": route(calls.RmrBind, win.rmr_bind),
            "rmr_free": route(calls.RmrFree, win.rmr_free),
            "evd_create": route(calls.EvdCreate, evd.evd_create),
            "evd_free": route(calls.EvdHandle, evd.evd_free),
            "evd_post_se": route(calls.EvdPostSe, evd.evd_post_se),
            "evd_resize": route(calls.EvdResize, evd.evd_resize),
            "ep_create": route(calls.EpCreate, ep.ep_create),
            "ep_create_with_srq": route(calls.EpCreateWithSrq, srq.ep_create_with_srq),
            "srq_create": route(calls.SrqCreate, srq.srq_create),
            "srq_free": route(calls.SrqHandle, srq.srq_free),
            "srq_set_lw": route(calls.SrqSetLw, srq.srq_set_lw),
            "ep_modify": route(calls.EpModify, ep.ep_modify),
            "ep_free": route(calls.EpHandle, ep.ep_free),
            "ep_connect": route(calls.EpConnect, cm.ep_connect),
            "ep_dup_connect": route(calls.EpDupConnect, cm.ep_dup_connect),
            "ep_set_watermark": route(calls.EpSetWatermark, ep.ep_set_watermark),
            "ep_disconnect": route(calls.EpDisconnect, ep.ep_disconnect),
            "ep_reset": route(calls.EpHandle, ep.ep_reset),
            "psp_create": route(calls.PspCreate, cm.psp_create),
            "psp_free": route(calls.PspFree, cm.psp_free),
            "rsp_create": route(calls.RspCreate, cm.rsp_create),
            "rsp_free": route(calls.RspFree, cm.rsp_free),
            "cr_accept": route(calls.CrAccept, cm.cr_accept),
            "cr_reject": route(calls.CrReject, cm.cr_reject),
            "cr_handoff": route(calls.CrHandoff, cm.cr_handoff),
        }

    def _admin_table(self) -> dict[str, Route]:
        adm = self.admin
        return {
            "fault_add": route(calls.FaultAdd, adm.fault_add),
            "fault_remove": route(calls.FaultRemove, adm.fault_remove),
            "fault_clear": route(Empty, adm.fault_clear),
            "fault_list": route(Empty, adm.fault_list),
            "fault_log": route(calls.FaultLog, adm.fault_log),
            "rmr_revoke": route(calls.RmrRevoke, adm.rmr_revoke),
            "node_crash": route(Empty, adm.node_crash),
            "node_status": route(Empty, adm.node_status),
        }

    def _peer_table(self) -> dict[FrameType, PeerHandler]:
        target, answers, cm = self.target, self.answers, self.connections
        return {
            FrameType.WRITE: target.request,
            FrameType.WRITES: target.request,
            FrameType.READ_REQ: target.request,
            FrameType.SEND: target.request,
            FrameType.SENDS: target.request,
            FrameType.ATOMIC: target.request,
            FrameType.WRITE_IMM: target.request,
            FrameType.ACK: answers.acked,
            FrameType.READ_RESP: answers.read_landed,
            FrameType.ATOMIC_RESP: answers.atomic_answered,
            FrameType.NAK: answers.nak,
            FrameType.CONN_REQ: cm.request,
            FrameType.CONN_ACCEPT: cm.accepted,
            FrameType.CONN_REJECT: cm.rejected,
            FrameType.CONN_RTU: cm.rtu,
            FrameType.DISCONNECT: cm.peer_disconnect,
            FrameType.HEARTBEAT: lambda link, frame: None,
            FrameType.ERROR: self._peer_error,
        }

    @property
    def address_text(self) -> str:
        """This node's peer address as ``host:port``."""
        return f"{self.address[0]}:{self.address[1]}"

    def _hello_name(self) -> str:
        return f"{self.name}@{self.address_text}"

    def _hello(self) -> bytes:
        return hello(ROLE_PEER, self._hello_name())

    def _status(self) -> dict[str, object]:
        return {
            "name": self.name,
            "address": self.address_text,
            "pid": self.pid,
            "links": len(self.wire.links),
            "consumers": len(self.consumers),
            "rules": len(self.faults.rules),
            **asdict(self.intake.counts),
        }

    # -- the consumer plane --------------------------------------------------------------------

    def consumer_frame(
        self, channel: Channel, consumer: Consumer | None, frame: Frame, role: str = ROLE_CONSUMER
    ) -> Consumer | None:
        """Handle one frame from a consumer (or, on the admin socket, an admin); the first must
        be HELLO in that ``role``, which opens the IA (or the admin connection)."""
        if consumer is None:
            name = check_hello(frame, role, self.limits.hello_name)
            admin = role == ROLE_ADMIN
            if not admin and any(c.name == name for c in self.consumers.values()):
                raise UnexpectedFrame(f"an open IA is named {name!r} already")
            if not admin and len(self.consumers) >= self.limits.consumers:
                raise ResourceRefused(
                    f"DAT_INSUFFICIENT_RESOURCES: this node serves its limit of "
                    f"{self.limits.consumers} IAs (--limit consumers)"
                )
            pid = channel.peer_pid
            consumer = Consumer(self._new_handle(), channel, name, pid=pid, admin=admin)
            if not admin:
                self.consumers[consumer.id] = consumer
            channel.send(self._hello())
            log.info("%s %s opened connection %d", role, consumer.name, consumer.id)
        elif frame.type == FrameType.DOORBELL and not consumer.admin:
            handle = frame.fields[0]
            srq = consumer.srqs.get(handle) if type(handle) is int else None
            if srq is not None:  # handles are unique across kinds
                self.srqs.doorbell(srq)
            else:
                self.intake.doorbell(consumer, handle)
        elif frame.type == FrameType.CALL:
            for ep in list(consumer.polled.values()):  # a call never overtakes a post
                self.intake.drain(ep)
            if consumer.srqs:
                self.srqs.poll(consumer)
            self._call(consumer, frame.fields)
        else:
            raise UnexpectedFrame(f"{frame.type.name} is not a consumer request")
        return consumer

    def _call(self, consumer: Consumer, fields: list[object]) -> None:
        req_id, method, args = fields
        if type(req_id) is not int or type(method) is not str:
            raise MalformedFrame("a call's request id is an integer, its method a string")
        table = self.admin_calls if consumer.admin else self.calls
        found = table.get(method)
        result: Sequence[object] = ()
        code, message = 0, ""
        try:
            if found is None and method in self.admin_calls:
                raise DatModelNotSupported(message=f"{method} is served on the admin socket only")
            if found is None:
                raise DatModelNotSupported(message=f"unknown call {method!r}")
            within_quota(consumer, self.limits, method)
            result = found[1](consumer, args, method)
        except DatError as err:
            code, message = err.code, err.message
        except Exception as err:  # a bug of the daemon: never disguised as the caller's error
            log.exception("internal error in %s from consumer %s", method, consumer.name)
            code, message = DatInternalError().code, f"internal error in {method}: {err!r}"
        consumer.channel.send(encode(FrameType.REPLY, req_id, code, message, list(result)))

    def consumer_lost(self, consumer: Consumer) -> None:
        """The consumer's socket closed: free its IA abruptly, as dat_ia_close(ABRUPT) would."""
        if consumer.closed:
            return
        consumer.closed = True
        self.consumers.pop(consumer.id, None)
        for ep in list(consumer.eps.values()):
            self.eps.destroy(ep)
        self.srqs.abandon(consumer)
        self.connections.abandon(consumer)
        self.windows.abandon(consumer)
        self.regs.abandon(consumer)
        self.evds.abandon(consumer)
        self.memory.remove_owned(consumer.id)
        log.info("consumer %s closed IA %d", consumer.name, consumer.id)

    def shutdown(self, reason: str) -> None:
        """The daemon stops, before it unmaps its consumers' memory: every IA closes as its
        consumer's death would (its EPs disconnect: the peer sees DISCONNECTED), then every
        peer stream is reset; a frame read after this finds no EP and no event queue."""
        for consumer in list(self.consumers.values()):
            consumer.channel.close(reason)
            self.consumer_lost(consumer)
        for link in list(self.wire.links.values()):
            self.links.reset(link, reason)

    def desk_consumer(self, ia: object, pid: int) -> Consumer:  # fabricd/desk.py
        """The open IA named ``ia`` of process ``pid`` (the kernel's word for who connected to
        the desk); PermissionError if there is none."""
        for consumer in self.consumers.values():
            if consumer.name == ia and consumer.pid == pid:
                return consumer
        raise PermissionError(f"process {pid} has no open IA named {ia!r}")

    # -- the peer plane ------------------------------------------------------------------------

    def peer_accepted(self, channel: Channel) -> PeerLink:
        """A peer daemon connected to our TCP port."""
        return self.links.accepted(channel)

    def link_up(self, link: PeerLink, channel: Channel) -> None:
        """Our outgoing stream is up."""
        self.links.up(link, channel)

    def link_failed(self, link: PeerLink, reason: str) -> None:
        """Our outgoing stream could not be made."""
        self.links.failed(link, reason)

    def link_lost(self, link: PeerLink, reason: str) -> None:
        """A stream ended or was cut."""
        self.links.lost(link, reason)

    def tick(self, now: float) -> None:
        """The heartbeat clock."""
        self.links.tick(now)

    def _fetch_receives(self, ep: Ep) -> None:
        """A message found no receive taken: the ones posted since, from the EP's receive
        queue or its SRQ (a broken ring closes that IA only)."""
        if ep.srq is None:
            self.intake.receives(ep)
        else:
            self.srqs.receives(ep.srq)

    def peer_sink(self, link: PeerLink, frame: Frame) -> Sink:
        """Where the payload of a frame from a peer lands: straight into registered memory."""
        if not link.authenticated:
            return DISCARD  # the frame itself will be refused
        if frame.type == FrameType.READ_RESP:
            return self.answers.read_sink(link, frame)
        if frame.type in LANDS:
            return self.target.sink(link, frame)
        raise MalformedFrame(f"{frame.type.name} carries no payload")

    def peer_frame(self, link: PeerLink, frame: Frame) -> None:
        """Handle one complete frame from a peer daemon; the first must be HELLO, then the
        cluster key's challenge-response; only then anything else."""
        if not link.authenticated:
            if not link.hello:
                self.links.hello(link, frame)
            elif frame.type == FrameType.AUTH:
                self.links.auth(link, frame)
            elif frame.type == FrameType.ERROR:
                self._peer_error(link, frame)
            else:
                raise PeerRefused(f"{frame.type.name} from a peer that has not authenticated")
            return
        handler = self.peer_frames.get(frame.type)
        if handler is None:
            raise UnexpectedFrame(f"{frame.type.name} is not a peer frame")
        handler(link, frame)

    def _peer_error(self, link: PeerLink, frame: Frame) -> None:
        """The peer gave up on the stream and says why: it ends here too."""
        self.links.reset(link, f"peer: {frame.fields[0]}")
