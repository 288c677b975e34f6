"""Peer links: the session of one daemon-to-daemon stream (HELLO, AUTH, up, lost) and heartbeats.

A stream starts with HELLO both ways (the version range, the node's name and address), then the
cluster key's challenge-response (proto.peer_auth); only then does the CM speak. A stream that
ends, is reset, hears nothing for the heartbeat timeout, or has not authenticated (or, accepted,
carried no connection request) within it breaks what it carried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fabricd.nic.epdriver import EpDriver
from fabricd.nic.objects import Channel, PeerLink
from fabricd.nic.wire import Wire
from proto.cm_states import CmInput, CmState
from proto.codec import Frame, encode, hello
from proto.constants import DtoCompletionStatus as St
from proto.constants import EpState as S
from proto.ep_states import EpInput
from proto.errors import MalformedFrame, PeerRefused, UnexpectedFrame, VersionMismatch
from proto.frames import MAX_HELLO_NAME, PROTOCOL_VERSION, ROLE_PEER, FrameType
from proto.limits import Limits
from proto.peer_auth import ACCEPT, CONNECT, NONCE_BYTES, Transcript, check, proof

log = logging.getLogger("fabricd")
HEARTBEAT = encode(FrameType.HEARTBEAT)


def check_hello(frame: Frame, role: str, most: int = MAX_HELLO_NAME) -> str:
    """Check a HELLO's version range, role and name (1..``most`` characters); returns the name."""
    if frame.type != FrameType.HELLO:
        raise UnexpectedFrame(f"expected HELLO, got {frame.type.name}")
    lo, hi, their_role, name = frame.fields
    if type(lo) is not int or type(hi) is not int or not lo <= PROTOCOL_VERSION <= hi:
        raise VersionMismatch(
            f"peer speaks versions {lo!r}..{hi!r}, this daemon speaks {PROTOCOL_VERSION}"
        )
    if their_role != role:
        raise UnexpectedFrame(f"a {their_role!r} said HELLO where a {role!r} was expected")
    if not isinstance(name, str) or not 0 < len(name) <= most:
        raise UnexpectedFrame(f"a HELLO's name is a string of 1..{most} characters")
    return name


class Links:
    """The streams to peer daemons: their start, their end, and heartbeats."""

    def __init__(
        self,
        wire: Wire,
        eps: EpDriver,
        hello_name: Callable[[], str],
        new_handle: Callable[[], int],
        peer_names: dict[str, str],
        heartbeat: tuple[float, float],
        limits: Limits,
        key: bytes | None,
        nonce: Callable[[], bytes],
    ) -> None:
        self.wire = wire
        self.eps = eps
        self.hello_name = hello_name
        self.new_handle = new_handle
        self.peer_names = peer_names
        self.interval, self.timeout = heartbeat
        self.limits = limits  # peer_links: streams at once; hello_name: a HELLO's name
        self.key = key  # the cluster key; None: peers are not authenticated (--no-cluster-key)
        self.nonce = nonce

    def accepted(self, channel: Channel) -> PeerLink:
        """A peer daemon connected to our TCP port."""
        link = self.wire.new_link(self.new_handle(), active=False)
        link.channel = channel
        link.born = self.wire.shell.now()
        if len(self.wire.links) > self.limits.peer_links:
            log.warning(
                "refused a peer stream from %s: this node holds its limit of %d "
                "(--limit peer_links)",
                channel.peer_address,
                self.limits.peer_links,
            )
            self.wire.drop(link, "the node holds its limit of peer streams")
        return link

    def up(self, link: PeerLink, channel: Channel) -> None:
        """Our outgoing connection is established: HELLO and our challenge (the CONN_REQ waits
        for the peer's proof)."""
        if link.closed:
            channel.close("endpoint gave up before the connection was made")
            return
        link.channel = channel
        link.born = self.wire.shell.now()
        link.nonce = self.nonce()
        self.wire.send(link, hello(ROLE_PEER, self.hello_name()))
        self.wire.send(link, encode(FrameType.AUTH, link.nonce, b""))

    def hello(self, link: PeerLink, frame: Frame) -> None:
        """The peer's HELLO: its node name (for fault rules) and address; the passive side
        answers with its own."""
        link.their_hello = check_hello(frame, ROLE_PEER, self.limits.hello_name)
        node, _, address = link.their_hello.rpartition("@")
        link.hello = True
        link.remote_node, link.remote_name = node or address, address
        if not link.active:
            self.wire.send(link, hello(ROLE_PEER, self.hello_name()))

    def auth(self, link: PeerLink, frame: Frame) -> None:
        """One step of the challenge-response (proto.peer_auth): the connecting side's
        challenge, the accepting side's answer, or the connecting side's answer."""
        nonce, got = frame.fields
        if not isinstance(nonce, bytes) or not isinstance(got, bytes):
            raise MalformedFrame("AUTH carries a nonce and a proof, both bytes")
        if link.active:  # the accepting side's answer and challenge
            t = Transcript(link.nonce, _challenge(nonce), self.hello_name(), link.their_hello)
            self._check(link, ACCEPT, t, got)
            self.wire.send(link, encode(FrameType.AUTH, b"", proof(self.key, CONNECT, t)))
            self._authenticated(link)
            unsent, link.unsent = link.unsent, []
            for header in unsent:
                self.wire.send(link, header)
        elif not link.their_nonce:  # the connecting side's challenge: answer it
            link.their_nonce, link.nonce = _challenge(nonce), self.nonce()
            t = Transcript(link.their_nonce, link.nonce, link.their_hello, self.hello_name())
            self.wire.send(link, encode(FrameType.AUTH, link.nonce, proof(self.key, ACCEPT, t)))
        else:  # the connecting side's answer
            t = Transcript(link.their_nonce, link.nonce, link.their_hello, self.hello_name())
            self._check(link, CONNECT, t, got)
            self._authenticated(link)

    def _check(self, link: PeerLink, side: str, t: Transcript, got: bytes) -> None:
        why = check(self.key, side, t, got)
        if why:
            name = link.channel.peer_address if link.channel is not None else "?"
            raise PeerRefused(f"peer {link.their_hello!r} at {name} refused: {why}")

    def _authenticated(self, link: PeerLink) -> None:
        link.authenticated = True
        self.peer_names[link.remote_name] = link.remote_node

    def failed(self, link: PeerLink, reason: str) -> None:
        """Our outgoing connection could not be made: the address is unreachable."""
        log.info("connect failed: %s", reason)
        self.wire.forget(link, CmInput.LOST)
        ep = link.ep
        if ep is not None and ep.state == S.ACTIVE_CONNECTION_PENDING:
            ep.link = None
            self.eps.input(ep, EpInput.UNREACHABLE)

    def lost(self, link: PeerLink, reason: str) -> None:
        """The stream ended or was cut: break whatever it carried."""
        if not self.wire.forget(link, CmInput.LOST):
            return
        log.info("link %d to %s lost: %s", link.id, link.remote_name or "?", reason)
        ep, link.ep = link.ep, None
        if ep is None or ep.link is not link:
            return
        ep.link = None
        if ep.state == S.COMPLETION_PENDING:
            self.eps.input(ep, EpInput.ACCEPT_FAILED)
        elif ep.state == S.ACTIVE_CONNECTION_PENDING:
            # lost before the peer said HELLO: no fabric node could be reached there
            self.eps.input(ep, EpInput.NON_PEER_REJECTED if link.hello else EpInput.UNREACHABLE)
        elif ep.state in (S.CONNECTED, S.DISCONNECT_PENDING):
            self.eps.broken(ep, first_status=St.DTO_ERR_TRANSPORT if ep.ops else None)

    def reset(self, link: PeerLink, reason: str) -> None:
        """A connection reset: both ends see the stream end (a connect: the host unreachable)."""
        channel = link.channel
        if link.active and not link.hello:
            self.failed(link, reason)
        else:
            self.lost(link, reason)
        if channel is not None:
            channel.close(reason)

    def tick(self, now: float) -> None:
        """Every heartbeat interval: a HEARTBEAT on each quiet stream, and a stream that has
        heard nothing for the heartbeat timeout is taken as cut (a silent partition)."""
        for link in list(self.wire.links.values()):
            if link.channel is None or link.closed or link.local:
                continue
            if now - link.born > self.timeout and not link.authenticated:
                self.reset(link, "not authenticated within the heartbeat timeout")
                continue
            if now - link.born > self.timeout and link.cm == CmState.IDLE:
                self.reset(link, "no connection request within the heartbeat timeout")
                continue
            if link.heard or not link.last_heard:
                link.heard, link.last_heard = False, now
            elif now - link.last_heard > self.timeout:
                self.reset(
                    link, f"nothing heard for {now - link.last_heard:.1f} s (heartbeat timeout)"
                )
                continue
            if not link.sent and link.authenticated:  # never before the handshake is done
                self.wire.send(link, HEARTBEAT)
            link.sent = False


def _challenge(nonce: bytes) -> bytes:
    if len(nonce) != NONCE_BYTES:
        raise MalformedFrame(f"an AUTH challenge is {NONCE_BYTES} bytes, not {len(nonce)}")
    return nonce
