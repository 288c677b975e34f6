"""The daemon's intake of work requests: a doorbell, the WQEs it announced taken off an EP's
send and receive queues (docs/host-interface.md section 5), and the polling that spares the
driver a doorbell while the EP is busy: while an ACK is coming (lingering) and for a moment
after requests retire (busy polling)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from fabricd.memory import MemoryRegistry
from fabricd.nic.cork import ack_clocked
from fabricd.nic.epdriver import EpDriver
from fabricd.nic.initiator import Initiator
from fabricd.nic.objects import Consumer, Ep, Shell, WorkQueues
from fabricd.nic.queues import (
    RQ_OPCODES,
    SQ_OPCODES,
    doorbell,
    posted,
    set_polling,
    take_one,
    watch,
)
from fabricd.nic.target import Target
from proto.constants import EpState as S
from proto.hostif import RingError

log = logging.getLogger("fabricd")
_CONNECTED: Final = S.CONNECTED  # (Finals: initiator.py says why)
LINGER: Final = 200e-6
"""Seconds POLL stays 1 after a look found an EP's queues empty while an ACK is coming
(``Intake._looks_again``), unless a retire looks first: the most a post made meanwhile waits
to be taken. So in the NIC core (its clock is the harness's); uvloop, the daemon's loop,
counts its timers in whole milliseconds and runs one of up to half a millisecond at its next
iteration, so there the deadline is the loop iteration after the empty look's turn (timed once
with perf_counter: uvloop's call_later with 200, 499 and 500 us ran after 51, 8 and 3 us, with
1 ms after 1,146 us; tests/unit/test_shell.py checks the order and the clock).
`fabricctl bench --size 4096 --window 64 --iters 200000 --cq-mod 16`, four interleaved pairs
with LINGER = 1e-3 (a real deadline): 608-865 MB/s -> 664-864, within noise: it stays."""
BUSY_POLL: Final = 50e-6
"""Seconds POLL stays 1 after the last outstanding request retires, the daemon looking at the
EP's queues in each loop iteration (Linux's busy polling of a socket): a consumer that posts
its next request when it sees the last one complete (a request-reply loop, a latency test)
rings no doorbell, and the daemon's wake-up leaves that round trip. `python -m bench.ab`, six
interleaved pairs, 64 B at window 1, median post to completion: Write 151 -> 104 us, Read
138 -> 94 us; the C driver's window-1 Writes 7.6k -> 8.5k/s (five pairs); window 64 within
noise. Not after bulk requests, whose driver sleeps. `fabricctl node status` counts it
(IntakeCounts): 3,050 window-1 Writes started 3,050 busy polls, 2,774-2,833 ended by a take,
with 1.3-2.5 empty looks each; 20,050 Writes at window 64 started 38-142; 1,050 1 MiB Writes
at window 16, none."""
BUSY_LOOKS: Final = 16
"""...and at most this many looks (the bound that also holds under a clock that stands
still: the in-memory fabric's). The daemon's clock is uvloop's loop.time(), which moves in
whole milliseconds: there a busy poll ends at this many looks or the clock's next tick, and
BUSY_POLL's measurements above are of that. A clock with microseconds in its place (the
poll then ends 50 us on), `python -m bench.ab HEAD --rounds 4`: 64 B at window 1, median
post to completion, Write 84 -> 113 us (ranges 82-140, 84-155), Read 97 -> 93 us; 64 B
Writes at window 64 1.07 x, 4 KiB moderated 1.06 x, ranges overlapping: not taken."""


SPIN_READS: Final = 64
"""...and before each of those looks leaves the turn, the daemon reads the send queue's
producer index this many more times (~1.7 us compiled, this VM): a request-reply consumer that
saw its completion is then posting, on the other CPU, and its WQE is taken in this turn, not
after a loop iteration (an epoll_pwait, a sched_yield and the look's own calls). 64 B at
window 1, `fabricctl bench --mode lat`, four interleaved pairs: Write 71-76 -> 66-67 us, Read
86-88 -> 85-87 (its turn lasts longer: the post is there by its end); 256 reads no better,
1,024 (~27 us) worse."""


def _spin(q: WorkQueues) -> bool:
    """Did the driver publish a WQE on the send queue within SPIN_READS reads of its index?"""
    sq = q.sq
    for _ in range(SPIN_READS):  # noqa: SIM110 - any() of a generator: a call per read
        if sq.available():
            return True
    return False


@dataclass(slots=True)
class IntakeCounts:
    """What the intake did since the daemon started (``fabricctl node status NAME``)."""

    doorbells: int = 0  # DOORBELL frames taken
    busy_polls: int = 0  # busy polling started: the last outstanding request of an EP retired
    busy_looks: int = 0  # looks of busy polling that found nothing
    busy_takes: int = 0  # busy polling ended by a look that took WQEs
    takes: int = 0  # looks that took request WQEs (requests / takes: how many a look finds)
    requests: int = 0  # request WQEs taken
    settled: int = 0  # busy polls' takes with nothing outstanding: POLL 0 at once (``drain``)


class Intake:
    """Work queue entries, from the rings to the initiator (requests) and target (receives)."""

    def __init__(
        self,
        memory: MemoryRegistry,
        initiator: Initiator,
        target: Target,
        eps: EpDriver,
        shell: Shell,
    ) -> None:
        self.memory = memory
        self.initiator = initiator
        self.target = target
        self.eps = eps
        self.shell = shell
        self.counts = IntakeCounts()

    def doorbell(self, consumer: Consumer, handle: object) -> None:
        """DOORBELL: take what the EP's queues announce, mark it HEARD, and look once more."""
        ep = consumer.eps.get(handle) if type(handle) is int else None
        if ep is None:  # freed since: its queues went with it
            log.info("consumer %s rang the doorbell of no EP %r", consumer.name, handle)
            return
        self.counts.doorbells += 1
        self.drain(ep)  # first what it announced: a driver that sees HEARD sees them taken
        doorbell(ep)
        self.memory.fence()  # HEARD, then a look: a driver that saw HEARD old rang nothing
        q = ep.queues
        if q is not None and posted(q):
            self.drain(ep)

    def drain(self, ep: Ep, linger: bool = True) -> None:
        """Take every WQE the driver published on the EP's queues, in order. Having taken
        some, the daemon polls the EP (POLL 1, so posts ring no doorbell) until a look at the
        end of a loop turn finds nothing new while nothing else will look (``_looks_again``);
        then it clears POLL, fences, and looks once more (a driver that still saw POLL 1 rang
        no doorbell). The same last look takes an EP whose POLL was cleared without one (it
        left CONNECTED) out of the consumer's polled EPs.

        A busy poll's take when no request was outstanding (a request-reply consumer's next
        post) ends the same way at once, in its own turn, not with POLL 1 and a look at the
        end of the turn: that consumer posts again when this request completes, so the look
        would find nothing, and the daemon sleeps sooner (the peer it woke may wait for this
        CPU). `python -m bench.ab`: window-1 64 B Writes 83 -> 81 us (eight rounds)."""
        q = ep.queues
        while q is not None:
            taken = received = 0
            settle = False
            if q.sq.available() or q.rq.available():  # ``posted``, inline: every look asks
                settle = q.busy_looks > 0 and not ep.ops  # request-reply: POLL 0 after it
                taken, plain = self._requests(ep, q)
                if taken:
                    self.counts.takes += 1
                    self.counts.requests += taken
                    # together: small Writes leave as one batch; plain ones are not done yet
                    self.initiator.transmit(ep, retire=not plain)
                if q.rq.available():
                    received = self._receives(ep, q)
            if taken or received:
                if q.busy_looks:
                    self.counts.busy_takes += 1
                q.busy_looks = 0  # what busy polling waited for came
                if not settle:
                    self._watch(ep, q)
                    return
                self.counts.settled += 1  # then POLL 0 and the last look, below
                q.progress += 1
            elif linger and q.polling and self._looks_again(ep):
                self._linger(ep, q)  # POLL stays 1: the next retire looks (``look``)
                return
            elif q.polling and q.busy_looks > 0 and _spin(q):
                continue  # the consumer posted meanwhile: taken in this turn
            elif q.polling and q.busy_looks > 0 and self._busy(ep, q):
                return  # POLL stays 1: the next loop iteration looks
            if q.linger is not None:
                q.linger.cancel()
                q.linger = None
            set_polling(q, False)
            if ep.handle not in ep.consumer.polled:
                return  # not polled: a doorbell covers every post since its last empty look
            self.memory.fence()
            if not posted(q):
                del ep.consumer.polled[ep.handle]
                return
            q = ep.queues

    def _requests(self, ep: Ep, q: WorkQueues) -> tuple[int, bool]:
        """Take the send queue's WQEs, in order: runs of the common one (Initiator.post_plain)
        and each other one alone (a post that breaks the EP flushes the queue: what is left
        then is what the flush left); how many, and whether all were the common one (none of
        those is done before an answer comes)."""
        taken, plain = 0, True
        while True:
            took, more = self.initiator.post_plain(ep, q.sq, q.stage)
            taken += took
            wqe = take_one(q.sq, SQ_OPCODES) if more else None
            if wqe is None:
                return taken, plain
            self.initiator.post(ep.consumer, ep, wqe, q.stage)
            taken, plain = taken + 1, False

    def receives(self, ep: Ep) -> None:
        """Only the receives the EP's queue holds, when a message finds none taken (a broken
        ring closes the IA only)."""
        q = ep.queues
        if q is None:
            return
        try:
            if self._receives(ep, q):
                self._watch(ep, q)
        except RingError as err:
            ep.consumer.channel.close(f"EP {ep.handle}: {err}")

    def _receives(self, ep: Ep, q: WorkQueues) -> int:
        """Take the receive queue's WQEs, in order: runs of plain receives
        (Target.post_recv_plain) and each other one alone (a receive that breaks the EP
        flushes the queue: what is left then is what the flush left); how many."""
        taken = 0
        while True:
            taken += self.target.post_recv_plain(ep, q.rq)
            wqe = take_one(q.rq, RQ_OPCODES)
            if wqe is None:
                break
            if ep.srq is not None:
                raise RingError(f"EP {ep.handle} takes its receives from an SRQ")
            self.target.post_recv(ep, wqe.cookie, wqe.flags, wqe.segments)
            taken += 1
        if taken:
            self.eps.watermarks(ep)  # the EP took receive buffers: past a watermark?
        return taken

    def _looks_again(self, ep: Ep) -> bool:
        """Whether the daemon will look at a CONNECTED EP's queues again without a doorbell:
        an ACK is coming that retires requests (each retire looks: ``look``), and what its
        consumer posts meanwhile would wait for that ACK anyway (cork.ack_clocked); no
        message of its peer waits for a receive (a receive posted for it must ring: the
        requests may wait on that peer, which waits for the receive). A stream of posts at a
        window then rings no doorbell while the window is open."""
        link = ep.link
        return (
            ep.state == S.CONNECTED and not (link is not None and link.stalled) and ack_clocked(ep)
        )

    def retired(self, ep: Ep) -> None:
        """Requests retired (then a look, as ``look``); if they were the last outstanding ones
        of a CONNECTED EP, and not bulk (``Events.bulk``: its driver sleeps, it does not post
        at once), the daemon busy-polls its queues (POLL 1, a look in each loop iteration) for
        BUSY_POLL seconds or BUSY_LOOKS looks, until a look takes something. A busy poll
        already running goes on as it is: nothing was taken since it started, so this retire
        retired nothing new (an ACK that covers no request not yet done)."""
        q = ep.queues
        if q is None:
            return
        if (
            ep.state == _CONNECTED
            and not ep.ops
            and q.busy_looks <= 0
            and not self.eps.events.bulk(ep)
        ):
            q.busy_until, q.busy_looks = self.shell.now() + BUSY_POLL, BUSY_LOOKS
            self.counts.busy_polls += 1
            if not q.polling:
                watch(ep, q)  # POLL 1 before the look: a post that sees it rings nothing
        if q.polling:  # ``look``, inline
            self._poll_soon(ep, q)

    def emptying(self, ep: Ep) -> None:
        """A retire is about to complete the EP's last outstanding request (an ACK covers every
        one sent, or the last Read's answer came): POLL 1 before the completions are written
        (``retired`` then busy-polls), or a consumer that sees one at once, on the other CPU,
        and posts its next request finds POLL 0 and rings a doorbell. A look at the end of the
        turn clears it again if no busy polling starts (``drain``)."""
        q = ep.queues
        if q is not None and not q.polling and ep.state == _CONNECTED:
            watch(ep, q)

    def _busy(self, ep: Ep, q: WorkQueues) -> bool:
        """After an empty look of a busy poll that has looks left (``drain`` asks): does it
        go on? Then the next loop iteration looks."""
        if self.shell.now() > q.busy_until:
            q.busy_looks = 0
            return False
        q.busy_looks -= 1
        self.counts.busy_looks += 1
        self.shell.call_next(q.look or self._look(ep, q))
        return True

    def look(self, ep: Ep) -> None:
        """If the daemon polls the EP, a look at its queues at the end of this turn: requests
        retired (the look takes what its consumer posted since, POLL having stayed 1), or a
        message came to wait for a receive (the look clears POLL: ``_looks_again``)."""
        q = ep.queues
        if q is not None and q.polling:
            self._poll_soon(ep, q)

    def _watch(self, ep: Ep, q: WorkQueues) -> None:
        """WQEs were taken: POLL 1, and one look at the end of this loop turn."""
        if not q.polling:  # POLL 1 was set by ``watch``, its only setter: the EP is polled
            watch(ep, q)
        q.progress += 1
        self._poll_soon(ep, q)

    def _poll_soon(self, ep: Ep, q: WorkQueues) -> None:
        if not q.repoll:
            q.repoll = True
            self.shell.call_soon(q.look or self._look(ep, q))

    def _look(self, ep: Ep, q: WorkQueues) -> Callable[[], None]:
        """``poll(ep)`` as a callable, made once per queues (callers take ``q.look`` when it
        is made: no closure, nor this call, per look)."""
        look = q.look = partial(self.poll, ep)
        return look

    def _linger(self, ep: Ep, q: WorkQueues) -> None:
        """POLL stays 1 after an empty look: the daemon looks again at the next retire or
        LINGER seconds on, whichever comes first. At that timer a look takes what came; if
        no look took anything since the timer was set, it ends the polling (POLL 0)."""
        if q.linger is None:
            mark = q.progress
            q.linger = self.shell.call_later(LINGER, lambda: self._lingered(ep, q, mark))

    def _lingered(self, ep: Ep, q: WorkQueues, mark: int) -> None:
        q.linger = None
        if ep.queues is not q:
            return  # the queues went (or were replaced) meanwhile
        try:
            self.drain(ep, linger=q.progress != mark)
        except RingError as err:
            ep.consumer.channel.close(f"EP {ep.handle}: {err}")

    def poll(self, ep: Ep) -> None:
        """The end-of-turn look at a polled EP (a broken ring closes its IA only)."""
        q = ep.queues
        if q is None:
            return
        q.repoll = False
        try:
            self.drain(ep)
        except RingError as err:
            ep.consumer.channel.close(f"EP {ep.handle}: {err}")
