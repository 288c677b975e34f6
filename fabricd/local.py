"""The local path: a connection between two endpoints of the same daemon, without a socket.

Each side is a Channel whose ``send`` hands the decoded header and the sender's own payload
views to the other side; delivery (one loop turn later, batched) asks the NIC for the sink and
copies once, memory to memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from fabricd.nic import Nic, PeerLink
from proto.codec import Frame, decode_header
from proto.errors import ProtocolError

log = logging.getLogger("fabricd")


def copy_into(sink: Sequence[memoryview], payload: Sequence[memoryview]) -> None:
    """Gather ``payload`` into ``sink`` (equal totals), segment by segment."""
    dst = iter(sink)
    out = next(dst, None)
    pos = 0
    for src in payload:
        while src and out is not None:
            n = min(len(src), len(out) - pos)
            out[pos : pos + n] = src[:n]
            src = src[n:]
            pos += n
            if pos == len(out):
                out, pos = next(dst, None), 0


class LocalChannel:
    """One end of an in-process connection (a core Channel)."""

    def __init__(self, nic: Nic, loop: asyncio.AbstractEventLoop) -> None:
        self.nic = nic
        self.loop = loop
        self.link: PeerLink | None = None
        self.peer: LocalChannel | None = None
        self.inbox: list[tuple[Frame, list[memoryview]]] = []
        self.closed = False

    @property
    def peer_address(self) -> str:
        return "local"

    @property
    def peer_pid(self) -> int:
        return 0

    def send(self, header: bytes, payload: Sequence[memoryview] = ()) -> None:
        peer = self.peer
        if self.closed or peer is None or peer.closed:
            return
        data = memoryview(header)
        end = 4 + int.from_bytes(data[:4], "big")
        frame = decode_header(data[4:end])
        if not peer.inbox:
            self.loop.call_soon(peer.deliver)
        # a whole frame (codec.encode_framed) carries its payload after its header
        peer.inbox.append((frame, [data[end:], *payload] if len(data) > end else list(payload)))

    def deliver(self) -> None:
        """Hand every queued frame to the NIC, landing payloads straight in their sinks."""
        inbox, self.inbox = self.inbox, []
        link = self.link
        if link is None or self.closed:
            return
        try:
            for frame, payload in inbox:
                if frame.payload_len:
                    sink = self.nic.peer_sink(link, frame)
                    if sink is None:
                        frame.payload = b"".join(payload)
                    elif sink:
                        copy_into(sink, payload)
                self.nic.peer_frame(link, frame)
                if self.closed:
                    return
            self.nic.peer_batch_end(link)
        except (ProtocolError, ValueError) as err:
            log.warning("local link: %s; closing it", err)
            self.close(str(err))
            self.nic.link_lost(link, str(err))

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        peer = self.peer
        if peer is not None and not peer.closed and peer.link is not None:
            # the other end sees its stream end once the frames already sent have arrived
            self.loop.call_soon(peer._ended, reason)

    def _ended(self, reason: str) -> None:
        if self.inbox:
            self.deliver()
        self.closed = True
        if self.link is not None:
            self.nic.link_lost(self.link, f"local peer closed: {reason}")


def local_pair(nic: Nic, loop: asyncio.AbstractEventLoop, active: PeerLink) -> None:
    """Connect ``active`` (an outgoing link) to a new passive link of the same NIC."""
    a, b = LocalChannel(nic, loop), LocalChannel(nic, loop)
    a.peer, b.peer = b, a
    a.link = active
    b.link = nic.peer_accepted(b)
    active.local = b.link.local = True
    nic.link_up(active, a)
