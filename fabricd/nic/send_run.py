"""A run of Sends from one SENDS frame that land in their receives one after the other and
complete together (Target._sends): a receive in shared memory is filled as its Send is taken;
the bytes bound for a C program's receives are planned and written when the run ends, in one
system call, straight from the frame's payload (no mirror in between)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricd.nic.objects import Ep, PeerLink, Recv
from fabricd.nic.views import scatter, truncate, truncate_spans
from fabricd.procmem import Scatter, add_piece


@dataclass(eq=False, slots=True)
class SendRun:
    """The Sends taken so far, from sequence number ``first``: their completions, the receives
    they took (given back if the run cannot be stored), their bodies, and the plan of the
    bytes for process ``pid``'s memory."""

    first: int
    done: list[tuple[int, int, int]] = field(default_factory=list)
    recvs: list[Recv] = field(default_factory=list)
    bodies: list[memoryview] = field(default_factory=list)
    pid: int = 0
    pieces: list[Scatter] = field(default_factory=list)

    @property
    def last(self) -> int:
        """The sequence number of the run's last Send."""
        return self.first + len(self.done) - 1

    def take(self, recv: Recv, body: memoryview, at: int) -> bool:
        """Land ``body`` (the payload's bytes [at, +len)) in ``recv``, which holds it: False,
        and nothing taken, when part of the receive is a process's memory and part is not,
        its process is not the run's, or its LMR was freed since it was posted (the general
        path stores it, or fails it)."""
        n, spans = len(body), recv.spans
        if not spans:
            views = recv.views
            if len(views) == 1:
                views[0][:n] = body
            else:
                scatter(body, truncate(views, n))
        elif len(spans) == 1:  # the common receive: one segment
            lmr, address, _ = spans[0]
            if lmr.freed:
                return False
            if lmr.pid != self.pid:
                if self.pid:
                    return False
                self.pid = lmr.pid
            if n:
                add_piece(self.pieces, address, at, n)
        else:
            pid = spans[0][0].pid
            if self.pid not in (0, pid) or any(lmr.pid != pid or lmr.freed for lmr, _, _ in spans):
                return False
            self.pid = pid
            for _, address, length in truncate_spans(spans, n):
                add_piece(self.pieces, address, at, length)
                at += length
        self.done.append((0, recv.cookie, n))  # proto.events.RECEIVED_AT
        self.recvs.append(recv)
        self.bodies.append(body)
        return True


def in_receives(link: PeerLink, ep: Ep, seq: int) -> bool:
    """May the Sends from ``seq`` on land in a run as Target._landed lands them, in receives
    taken already (nothing holds them back, the EP's receives are its own)?
    fabricd/_receives.c's ``sends`` (the first receive in shared memory) or ``planned`` (in a
    C program's) then checks each receive."""
    return (
        bool(ep.recvs)
        and not link.stalled
        and link.fault is None
        and seq > link.acked
        and ep.taking is None
        and ep.srq is None
    )
