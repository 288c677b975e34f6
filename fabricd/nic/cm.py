"""Connection management: PSPs and RSPs, connection requests, and the CM frames on the wire.

Each link's connection moves through the CM table (proto.cm_states), each EP through the EP
table (through the EP driver). The active side queues CONN_REQ behind the TCP connect; the
passive side turns it into a CR and a CONNECTION_REQUEST event, and answers when the consumer
calls dat_cr_accept or dat_cr_reject; RTU completes the handshake.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fabricd.nic.epdriver import EpDriver
from fabricd.nic.events import Events
from fabricd.nic.objects import Consumer, Cr, Ep, Listener, Listeners, PeerLink, Shell, lookup
from fabricd.nic.wire import Wire, move
from proto import calls, ep_states
from proto.cm_states import CmInput
from proto.codec import Frame, encode
from proto.constants import DatReturnSubtype as Sub
from proto.constants import EpState as S
from proto.constants import EventNumber as E
from proto.constants import PspFlags
from proto.ep_states import EpInput
from proto.errors import (
    DatConnQualInUse,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatModelNotSupported,
    MalformedFrame,
    UnexpectedFrame,
)
from proto.events import ConnectionRequest
from proto.frames import FrameType
from proto.limits import MAX_PRIVATE_DATA, Limits

log = logging.getLogger("fabricd")
TIMEOUT_INFINITE = 0xFFFFFFFF


def private_data(value: bytes | None, subtype: Sub, most: int = MAX_PRIVATE_DATA) -> bytes:
    """Consumer private data: at most ``most`` bytes (DAT_INVALID_PARAMETER)."""
    if value is not None and len(value) > most:
        raise DatInvalidParameter(
            subtype, f"private data exceeds {most} bytes (max_private_data_size)"
        )
    return value or b""


def peer_private_data(value: object) -> bytes:
    """Private data from a peer: bytes of at most MAX_PRIVATE_DATA, or a protocol error."""
    if value is None:
        return b""
    if not isinstance(value, bytes) or len(value) > MAX_PRIVATE_DATA:
        raise MalformedFrame(f"private data must be bytes of at most {MAX_PRIVATE_DATA}")
    return value


class ConnectionManager:
    """Listeners, connection requests, and the connect / accept / reject handshake."""

    def __init__(
        self,
        shell: Shell,
        wire: Wire,
        eps: EpDriver,
        events: Events,
        listeners: Listeners,
        new_handle: Callable[[], int],
        peer_names: dict[str, str],
        limits: Limits,
    ) -> None:
        self.shell = shell
        self.limits = limits  # ia_eps counts the EPs PSPs make; private_data what a call carries
        self.wire = wire
        self.eps = eps
        self.events = events
        self.listeners = listeners
        self.new_handle = new_handle
        self.peer_names = peer_names

    # -- the active side -----------------------------------------------------------------------

    def ep_connect(self, consumer: Consumer, a: calls.EpConnect) -> calls.EpMoved:
        """dat_ep_connect: CONN_REQ goes out once the stream to the peer is up."""
        ep = lookup(consumer.eps, a.ep, Sub.INVALID_HANDLE_EP, "endpoint")
        if not 0 < a.port < 65536:
            raise DatInvalidParameter(Sub.INVALID_ARG2, "remote address must be (host, port)")
        if a.conn_qual < 0:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "bad conn_qual")
        if a.timeout_us <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "timeout must be positive")
        pdata = private_data(a.private_data, Sub.INVALID_ARG6, self.limits.private_data)
        if ep.state == S.UNCONNECTED and (not ep.pz or not ep.connect_evd):
            raise DatInvalidState(
                Sub.INVALID_STATE_EP_NOTREADY,
                "the EP needs a PZ and a connect EVD before it connects",
            )
        self.eps.input(ep, EpInput.CONNECT)
        link = self.wire.new_link(self.new_handle(), active=True)
        move(link, CmInput.CONNECT)
        link.ep, ep.link = ep, link
        link.remote_name = f"{a.host}:{a.port}"
        ep.remote = (a.host, a.port, a.conn_qual)
        link.remote_node = self.peer_names.get(link.remote_name, "")
        rd_in, rd_out = ep.attr.max_rdma_read_in, ep.attr.max_rdma_read_out
        link.unsent.append(encode(FrameType.CONN_REQ, a.conn_qual, pdata, rd_in, rd_out))
        if a.timeout_us != TIMEOUT_INFINITE:
            ep.timer = self.shell.call_later(a.timeout_us / 1e6, lambda: self._timed_out(link))
        self.shell.connect_peer(link, a.host, a.port)
        return calls.EpMoved(ep.handle, ep.state)

    def ep_dup_connect(self, consumer: Consumer, a: calls.EpDupConnect) -> calls.EpMoved:
        """dat_ep_dup_connect: dat_ep_connect to the remote address and conn_qual the CONNECTED
        ``dup`` EP connected to (one that accepted its connection named none: the model is not
        supported)."""
        lookup(consumer.eps, a.ep, Sub.INVALID_HANDLE_EP, "endpoint")
        dup = lookup(consumer.eps, a.dup, Sub.INVALID_HANDLE_EP, "endpoint")
        if a.timeout_us <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "timeout must be positive")
        pdata = private_data(a.private_data, Sub.INVALID_ARG5, self.limits.private_data)
        if dup.state != S.CONNECTED:
            raise ep_states.state_error(dup.state, "dat_ep_dup_connect's dup_ep")
        if dup.remote is None:
            raise DatModelNotSupported(
                message="dup_ep accepted its connection: there is no conn_qual to connect to"
            )
        host, port, conn_qual = dup.remote
        return self.ep_connect(
            consumer, calls.EpConnect(a.ep, host, port, conn_qual, a.timeout_us, pdata)
        )

    def _timed_out(self, link: PeerLink) -> None:
        ep = link.ep
        if ep is not None and ep.state == S.ACTIVE_CONNECTION_PENDING:
            ep.timer = None
            if not link.closed:
                move(link, CmInput.TIMEOUT)
            self.eps.input(ep, EpInput.CONNECT_TIMEOUT)

    def accepted(self, link: PeerLink, frame: Frame) -> None:
        """CONN_ACCEPT: the EP is connected; RTU tells the passive side."""
        ep = link.ep
        if ep is None or not link.active:
            raise UnexpectedFrame("CONN_ACCEPT on a link with no connecting endpoint")
        move(link, CmInput.CONN_ACCEPT)
        pdata = peer_private_data(frame.fields[0])
        self.eps.cancel_timer(ep)
        self.eps.input(ep, EpInput.PEER_ACCEPTED, pdata)
        self.wire.send(link, encode(FrameType.CONN_RTU))

    def rejected(self, link: PeerLink, frame: Frame) -> None:
        """CONN_REJECT: by the peer consumer (with its private data) or by its daemon."""
        by_peer, pdata = frame.fields
        move(link, CmInput.CONN_REJECT)
        ep = link.ep
        if ep is None:
            return
        what = EpInput.PEER_REJECTED if by_peer else EpInput.NON_PEER_REJECTED
        self.eps.input(ep, what, peer_private_data(pdata) if by_peer else b"")

    # -- the passive side ----------------------------------------------------------------------

    def request(self, link: PeerLink, frame: Frame) -> None:
        """CONN_REQ: a CR and a CONNECTION_REQUEST event, or a rejection by this daemon."""
        conn_qual, pdata, _, _ = frame.fields
        listener = self._listener_for(conn_qual)
        if listener is None or link.active:
            move(link, CmInput.REFUSE)
            self.wire.send(link, encode(FrameType.CONN_REJECT, False, b""))
            self.wire.drop(link, f"no listener on conn_qual {conn_qual!r}")
            return
        move(link, CmInput.CONN_REQ)
        self._offer(link, listener, peer_private_data(pdata))

    def _offer(self, link: PeerLink, listener: Listener, pdata: bytes) -> None:
        """A new CR of ``listener`` for the request on ``link``, and its CONNECTION_REQUEST."""
        consumer = listener.consumer
        cr = Cr(self.new_handle(), consumer, link, listener, pdata)
        consumer.crs[cr.handle] = link.cr = cr
        if listener.ep is not None:  # an RSP fires once
            cr.ep, listener.fired = listener.ep, True
            self.listeners.stop(listener)
            self.eps.input(cr.ep, EpInput.REQUEST_ARRIVED)
        elif listener.flags & PspFlags.PROVIDER:  # an EP with no PZ or EVDs yet
            cr.ep = self.eps.provide(consumer, self.new_handle())
        event = ConnectionRequest(
            listener.evd,
            listener.handle,
            listener.conn_qual,
            cr.handle,
            link.remote_name,
            cr.private_data,
            cr.ep.handle if cr.ep is not None else 0,
        )
        self.events.push(consumer, E.CONNECTION_REQUEST_EVENT, event)

    def _listener_for(self, conn_qual: object) -> Listener | None:
        """The PSP or RSP of ``conn_qual``, unless a PSP's backlog (its EVD) is full."""
        listener = self.listeners.by_conn_qual.get(conn_qual) if type(conn_qual) is int else None
        if listener is not None and listener.ep is None:
            waiting = sum(1 for cr in listener.consumer.crs.values() if cr.listener is listener)
            if waiting >= listener.backlog:
                log.info("conn_qual %d: backlog of %d full", conn_qual, listener.backlog)
                return None
            if (
                listener.flags & PspFlags.PROVIDER
                and len(listener.consumer.eps) >= self.limits.ia_eps
            ):
                log.info("conn_qual %d: its IA holds its limit of EPs", conn_qual)
                return None
        return listener

    def cr_accept(self, consumer: Consumer, a: calls.CrAccept) -> calls.EpMoved:
        """dat_cr_accept: CONN_ACCEPT goes out; RTU will make the EP CONNECTED."""
        cr = lookup(consumer.crs, a.cr, Sub.INVALID_HANDLE_CR, "connection request")
        pdata = private_data(a.private_data, Sub.INVALID_ARG4, self.limits.private_data)
        ep = self._accepting_ep(consumer, cr, a.ep)
        if not ep.pz or not ep.connect_evd:
            raise DatInvalidState(
                Sub.INVALID_STATE_EP_NOTREADY,
                "the EP needs a PZ and a connect EVD (dat_ep_modify) before it accepts",
            )
        self.eps.input(ep, EpInput.ACCEPT)
        del consumer.crs[cr.handle]
        link, link.cr = cr.link, None
        if link.closed:
            self.eps.input(ep, EpInput.ACCEPT_FAILED)
            return calls.EpMoved(ep.handle, ep.state)
        move(link, CmInput.ACCEPT)
        ep.link, link.ep = link, ep
        rd_in, rd_out = ep.attr.max_rdma_read_in, ep.attr.max_rdma_read_out
        self.wire.send(link, encode(FrameType.CONN_ACCEPT, pdata, rd_in, rd_out))
        return calls.EpMoved(ep.handle, ep.state)

    @staticmethod
    def _accepting_ep(consumer: Consumer, cr: Cr, handle: int) -> Ep:
        """The EP named for an accept: the request's own (handle 0), or an UNCONNECTED one."""
        if not handle:
            if cr.ep is None:
                raise DatInvalidHandle(Sub.INVALID_HANDLE_EP, "this request carries no endpoint")
            return cr.ep
        ep = lookup(consumer.eps, handle, Sub.INVALID_HANDLE_EP, "endpoint")
        if cr.ep is not None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EP, "this request carries its own EP")
        if ep.state != S.UNCONNECTED:  # a PASSIVE_CP EP waits for its own RSP's request
            raise ep_states.state_error(ep.state, "dat_cr_accept with this EP")
        return ep

    def cr_reject(self, consumer: Consumer, a: calls.CrReject) -> calls.EpMoved:
        """dat_cr_reject: the active side gets PEER_REJECTED with this private data."""
        cr = lookup(consumer.crs, a.cr, Sub.INVALID_HANDLE_CR, "connection request")
        pdata = private_data(a.private_data, Sub.INVALID_ARG3, self.limits.private_data)
        del consumer.crs[cr.handle]
        if not cr.link.closed:
            move(cr.link, CmInput.REJECT)
        self.wire.send(cr.link, encode(FrameType.CONN_REJECT, True, pdata))
        self.wire.drop(cr.link, "connection request rejected")
        return self._give_back(cr.ep)

    def cr_handoff(self, consumer: Consumer, a: calls.CrHandoff) -> calls.EpMoved:
        """dat_cr_handoff: the request goes to the PSP or RSP of ``conn_qual`` on this node
        (a new CR there, and its CONNECTION_REQUEST event on that listener's EVD). The
        caller's CR is destroyed; an EP it carried goes back as on dat_cr_reject (an RSP's to
        UNCONNECTED, a PROVIDER PSP's is freed), and nothing is sent to the active side."""
        cr = lookup(consumer.crs, a.cr, Sub.INVALID_HANDLE_CR, "connection request")
        if a.conn_qual < 0 or a.conn_qual == cr.listener.conn_qual:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"cannot hand off to {a.conn_qual}")
        listener = self._listener_for(a.conn_qual)
        if listener is None:
            raise DatInvalidParameter(
                Sub.INVALID_ARG2, f"no listener on conn_qual {a.conn_qual} takes the request"
            )
        del consumer.crs[cr.handle]
        moved = self._give_back(cr.ep)
        self._offer(cr.link, listener, cr.private_data)
        return moved

    def _give_back(self, ep: Ep | None) -> calls.EpMoved:
        """The EP of a CR that was rejected or handed off: a PROVIDER PSP's is freed (the
        provider made it), an RSP's is UNCONNECTED again."""
        if ep is None:
            return calls.EpMoved(0, 0)
        if ep.state == S.TENTATIVE_CONNECTION_PENDING:
            self.eps.destroy(ep)  # the provider made it, the provider frees it
            return calls.EpMoved(0, 0)
        if ep.state == S.PASSIVE_CONNECTION_PENDING:
            self.eps.input(ep, EpInput.REJECT)
        return calls.EpMoved(ep.handle, ep.state)

    def rtu(self, link: PeerLink, frame: Frame) -> None:
        """CONN_RTU: the accepted EP is connected."""
        ep = link.ep
        if ep is None or ep.state != S.COMPLETION_PENDING:
            raise UnexpectedFrame("RTU with no accepted endpoint")
        move(link, CmInput.RTU)
        self.eps.input(ep, EpInput.RTU)

    def peer_disconnect(self, link: PeerLink, frame: Frame) -> None:
        """DISCONNECT from the peer: the EP leaves its connection."""
        move(link, CmInput.PEER_DISCONNECT)
        ep = link.ep
        if ep is None:
            self.wire.drop(link, "peer disconnected")
            return
        self.eps.input(ep, EpInput.PEER_DISCONNECTED)

    # -- PSP and RSP ---------------------------------------------------------------------------

    def _listen(
        self, consumer: Consumer, conn_qual: int, evd: int, flags: int, ep: Ep | None
    ) -> Listener:
        if conn_qual < 0:
            raise DatInvalidParameter(Sub.INVALID_ARG2, "bad conn_qual")
        if evd <= 0:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_EVD_CR, f"bad EVD {evd!r}")
        if conn_qual in self.listeners.by_conn_qual:
            raise DatConnQualInUse(message=f"conn_qual {conn_qual} already has a listener")
        listener = Listener(self.new_handle(), consumer, conn_qual, evd, flags, ep)
        self.listeners.add(listener)
        return listener

    def psp_create(self, consumer: Consumer, a: calls.PspCreate) -> calls.Handle:
        """dat_psp_create: its CR EVD's length is its backlog."""
        if a.flags not in (PspFlags.CONSUMER, PspFlags.PROVIDER):
            raise DatInvalidParameter(Sub.INVALID_ARG4, f"bad PSP flags {a.flags!r}")
        if a.backlog <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "the CR EVD has no room")
        listener = self._listen(consumer, a.conn_qual, a.evd, a.flags, None)
        listener.backlog = a.backlog
        return calls.Handle(listener.handle)

    def rsp_create(self, consumer: Consumer, a: calls.RspCreate) -> calls.RspCreated:
        """dat_rsp_create: the EP becomes RESERVED for one request."""
        ep = lookup(consumer.eps, a.ep, Sub.INVALID_HANDLE_EP, "endpoint")
        if ep.state != S.UNCONNECTED:
            raise ep_states.state_error(ep.state, "dat_rsp_create")
        listener = self._listen(consumer, a.conn_qual, a.evd, 0, ep)
        self.eps.input(ep, EpInput.RSP_CREATE)
        ep.rsp = listener
        return calls.RspCreated(listener.handle, ep.handle, ep.state)

    def psp_free(self, consumer: Consumer, a: calls.PspFree) -> calls.EpMoved:
        """dat_psp_free."""
        return self._unlisten(consumer, a.psp, Sub.INVALID_HANDLE_PSP)

    def rsp_free(self, consumer: Consumer, a: calls.RspFree) -> calls.EpMoved:
        """dat_rsp_free: a RESERVED EP is UNCONNECTED again."""
        return self._unlisten(consumer, a.rsp, Sub.INVALID_HANDLE_RSP)

    def _unlisten(self, consumer: Consumer, handle: int, subtype: Sub) -> calls.EpMoved:
        listener = lookup(consumer.psps, handle, subtype, "service point")
        self.listeners.remove(listener)
        ep = listener.ep
        if ep is None or listener.fired:  # a fired RSP's EP went on with its connection
            return calls.EpMoved(0, 0)
        if ep.state == S.RESERVED:
            self.eps.input(ep, EpInput.RSP_FREE)
        return calls.EpMoved(ep.handle, ep.state)

    def abandon(self, consumer: Consumer) -> None:
        """The consumer went away: its listeners stop, its requests are refused."""
        for listener in list(consumer.psps.values()):
            self.listeners.remove(listener)
        for cr in list(consumer.crs.values()):
            self.wire.drop(cr.link, "consumer went away before accepting")
