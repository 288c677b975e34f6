"""The wire: every frame to a peer leaves here, through the fault path when rules exist.

A delayed message queues behind the ones before it (a slow link, never a shuffle). What the
fault path decides beyond sending (fail a request, reset the link) is handed to the rooms that
own those effects, through the two callbacks the hub sets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fabricd.faults import FaultEngine
from fabricd.nic.faultpath import Emit, FailRequest, decide_send
from fabricd.nic.objects import PeerLink, Shell
from proto.cm_states import CmInput, transition
from proto.constants import DtoCompletionStatus as St


def move(link: PeerLink, what: CmInput) -> None:
    """Drive the link's connection through the CM table (proto.cm_states): its one writer."""
    link.cm = transition(link.cm, what)


def _ignore_fail(link: PeerLink, seq: int | None, status: St) -> None:
    return None


def _ignore_reset(link: PeerLink, reason: str) -> None:
    return None


class Wire:
    """Sending to peers, with the fault rules applied and delays kept in order."""

    def __init__(self, node: str, shell: Shell, faults: FaultEngine) -> None:
        self.node = node
        self.shell = shell
        self.faults = faults
        self.links: dict[int, PeerLink] = {}
        self.on_fail: Callable[[PeerLink, int | None, St], None] = _ignore_fail
        self.on_reset: Callable[[PeerLink, str], None] = _ignore_reset

    def send(self, link: PeerLink, header: bytes, payload: Sequence[memoryview] = ()) -> None:
        """Send one frame to the peer of ``link`` (nothing once it is closed). Without fault
        rules, ``header`` may be the whole frame (codec.encode_framed: a stream writes it as
        it is, the local path finds the payload after the header); the rules read the header
        alone."""
        if link.channel is None or link.closed:
            return
        if not self.faults.active:
            link.messages += 1
            link.channel.send(header, payload)
            link.sent = True
            return
        decisions = decide_send(self.faults, self.node, link, header, payload, self.shell.now())
        for decision in decisions:
            if isinstance(decision, Emit):
                self._emit(link, decision.header, decision.payload, decision.delay)
            elif isinstance(decision, FailRequest):
                self.on_fail(link, decision.seq, decision.status)
            else:
                self.on_reset(link, decision.reason)

    def _emit(
        self, link: PeerLink, header: bytes, payload: Sequence[memoryview], delay: float
    ) -> None:
        """Send, or queue until ``delay`` from now behind what is queued already."""
        if link.channel is None or link.closed:
            return
        if delay <= 0 and not link.delayed:
            link.channel.send(header, payload)
            link.sent = True
            return
        now = self.shell.now()
        at = max(now + delay, link.delayed[-1][0] if link.delayed else now)
        link.delayed.append((at, header, list(payload)))
        if link.release is None:
            link.release = self.shell.call_later(at - now, lambda: self.release(link))

    def release(self, link: PeerLink, everything: bool = False) -> None:
        """Send what is due (or everything: the rules were cleared); re-arm for the rest."""
        link.release = None
        now = self.shell.now()
        while link.delayed and link.channel is not None and (not link.closed or link.closing):
            at, header, payload = link.delayed[0]
            if at > now + 1e-4 and not everything:
                link.release = self.shell.call_later(at - now, lambda: self.release(link))
                return
            link.delayed.popleft()
            link.channel.send(header, payload)
        link.delayed.clear()
        if link.closing and link.channel is not None:  # the end follows what was held back
            link.channel.close(link.closing)
            link.closing = ""

    def release_all(self) -> None:
        """The rules were cleared: nothing is held back any more."""
        for link in self.links.values():
            if link.delayed:
                if link.release is not None:
                    link.release.cancel()
                self.release(link, everything=True)

    def new_link(self, link_id: int, active: bool) -> PeerLink:
        """A link in the table (its CM starts IDLE)."""
        link = self.links[link_id] = PeerLink(link_id, active)
        return link

    def forget(self, link: PeerLink, what: CmInput) -> bool:
        """Take a link out of the table (its CM closes); False if it was closed already."""
        if link.closed:
            return False
        link.closed = True
        move(link, what)
        self.links.pop(link.id, None)
        return True

    def drop(self, link: PeerLink, reason: str) -> None:
        """This side ends the link: forget it and close its stream, after what a delay still
        holds (a stream's end never overtakes the frames sent before it)."""
        if self.forget(link, CmInput.DISCONNECT) and link.channel is not None:
            if link.delayed:
                link.closing = reason
            else:
                link.channel.close(reason)
