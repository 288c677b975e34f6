"""The end of an input batch, where the daemon's deferred work runs and its output leaves.

The core defers work to "the end of this loop turn" (``Shell.call_soon``: coalesced event
notification, the look at a polled EP's queues) and every stream corks its frames. Run through
the event loop's own call_soon, each of those is one more loop iteration (an epoll_wait, then the
callback) on the path of every request. Inside a batch — everything one read from a socket set
in motion — they run when the batch ends instead: first the deferred work in order, then each
corked stream's one writev. A batch that landed a bulk payload leaves both to the next loop
iteration, where they join the work of the other streams read meanwhile. What the shell
schedules outside a batch (deferred work, busy polling's next look, a timer's callback) runs
in a later loop iteration as a batch of its own (``alone``); a frame corked outside any of
these (a connection's setup, a peer stream's read of lone Writes answered at once) leaves at
once.

A consumer's wake-up (a NOTIFY) waits for the daemon's input to drain, as a NIC moderates its
interrupts: it leaves at the first loop iteration that read nothing, or after ``IDLE_ROUNDS``
iterations or ``IDLE_WAIT`` seconds. While the daemon is landing a burst, the consumer it would
wake needs the same two cores: woken at every completion it preempts the daemon each time;
woken once the burst is in, it finds several completions (1 MiB RDMA Read, window 16:
3,463 -> 3,850 MB/s, bench.ab).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

log = logging.getLogger("fabricd")
IDLE_ROUNDS = 32  # loop iterations a wake-up waits at most for the input to drain
IDLE_WAIT = 1e-3  # and seconds


class Turn:
    """Deferred work and corked streams of the batch in progress."""

    def __init__(self) -> None:
        self._depth = 0
        self._deferred: deque[Callable[[], None]] = deque()
        self._corked: list[Callable[[], None]] = []
        self._later = False  # a batch left its work to the next loop iteration
        self._reads = 0  # reads from any stream so far
        self._idle: list[Callable[[], None]] = []  # waiting for the input to drain
        self._seen = 0  # ``_reads`` at the last look
        self._idle_since = 0.0  # when the first of ``_idle`` came
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        """The event loop, looked up once: asyncio.get_running_loop makes a getpid system call
        each time, and a batch that lands a bulk payload asks for it (the target daemon's
        samples under 4 KiB RDMA Writes: 2 % in getpid, py-spy)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` at the end of this batch (or in the next loop iteration, as a batch of
        its own: ``call_next``)."""
        if self._depth:
            self._deferred.append(fn)
        else:
            self.call_next(fn)

    def call_next(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the next loop iteration as a batch of its own: the work it defers
        runs, and the frames it corks leave, when it returns, not one iteration later (a busy
        poll's look that takes a request: its frame leaves with the look. Window-1 Writes,
        `python -m bench.syscalls`: epoll_pwait calls that did not sleep between an ACK's
        read and the next request's write 0.53-0.87 a round trip before, 0.09-0.15 after)."""
        self._running().call_soon(self.alone, fn)

    def alone(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` now as a batch of its own: what the event loop calls (``call_next``, a
        timer's callback: ``Daemon.call_later``), never inside a batch."""
        self._depth += 1
        self._deferred.append(fn)
        self._run()

    def cork(self, flush: Callable[[], None]) -> None:
        """Call a stream's ``flush`` once this batch's work is done; outside any batch, at
        once (when none was left for the next iteration: else with its frames, then)."""
        if self._depth:
            self._corked.append(flush)
        elif self._later:
            self._running().call_soon(flush)
        else:
            flush()

    def read(self) -> None:
        """A stream read bytes (the loop has input in hand)."""
        self._reads += 1

    def call_idle(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once a loop iteration read nothing (or ``IDLE_ROUNDS`` iterations or
        ``IDLE_WAIT`` seconds from now), in the order of these calls, with its frames corked."""
        self._idle.append(fn)
        if len(self._idle) == 1:
            loop = self._running()
            self._seen, self._idle_since = self._reads, loop.time()
            loop.call_soon(self._look, IDLE_ROUNDS)

    def _look(self, rounds: int) -> None:
        loop = self._running()
        busy = self._reads != self._seen
        if busy and rounds > 1 and loop.time() - self._idle_since < IDLE_WAIT:
            self._seen = self._reads
            loop.call_soon(self._look, rounds - 1)
            return
        idle, self._idle = self._idle, []
        self._deferred.extend(idle)
        self._depth += 1
        self._run()

    @property
    def idle(self) -> bool:
        """No batch in progress, and none left for the next loop iteration."""
        return not self._depth and not self._later

    def begin(self) -> None:
        """An input batch starts (batches may nest: the outermost one ends the turn)."""
        self._depth += 1

    def end(self, later: bool = False) -> None:
        """The batch is over: run what it deferred, then flush what it corked. ``later``: in
        the next loop iteration instead, after the input of the other streams that are ready
        (a batch that landed a bulk payload: its work and frames join theirs; measured, 1 MiB
        Send +30 % and Read +8 %, where a small operation's round trip would pay ~15 us)."""
        if self._depth > 1:
            self._depth -= 1
            return
        if later:
            self._depth -= 1
            if not self._later:
                self._later = True
                self._running().call_soon(self._run_later)
            return
        self._run()

    def _run_later(self) -> None:
        self._later = False
        self._depth += 1
        self._run()

    def _run(self) -> None:
        """Run the deferred work in order, then flush the corked streams (ends the batch)."""
        try:
            while self._deferred:
                fn = self._deferred.popleft()
                try:
                    fn()
                except Exception:  # as the event loop would: log it, run the rest
                    log.exception("error in deferred work %r", fn)
            corked, self._corked = self._corked, []
        finally:
            self._depth -= 1
        for flush in corked:
            flush()
