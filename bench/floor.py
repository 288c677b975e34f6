"""The floor of a window-1 round trip in the data path's shape, with no NIC work in it.

A 64 B RDMA Write at window 1 crosses three processes: the consumer writes a WQE into shared
memory and polls its completion queue; its daemon, busy polling after the last completion,
takes the WQE and sends a frame over TCP; the target's daemon answers with an ACK; the first
daemon writes the completion into shared memory. This measures that shape alone: a consumer
that stores a counter in a shared page and spins (``sched_yield`` between looks, as the
client's ``dat_evd_wait`` does) until the completion counter matches; a relay on uvloop that
busy-polls the page for up to ``BUSY_LOOKS`` looks after each completion (fabricd's rule,
with its yields) and then sleeps until a doorbell (an eventfd the consumer writes when the
relay's POLL word says it sleeps), sends 64 bytes per request and writes the completion when
the reply comes; and ``bench.limits``' uvloop echo as the target. What ``fabricctl bench
--mode lat`` measures beyond this median is the daemons' and the client's own work per
request.

``python -m bench.floor [--iters N] [--json]`` prints the median round trip beside the
request-reply RTT of ``bench.limits`` measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import mmap
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import uvloop

from bench.limits import (
    HOST,
    IO_TIMEOUT,
    MSG,
    REQUEST,
    WARMUP,
    helper,
    measure_request_reply,
    module_env,
)
from fabricd.nic.intake import BUSY_LOOKS

PAGE = 4096
POSTED, DONE, POLL = 0, 1, 2  # u32 words of the shared page: consumer's, relay's, relay's
REDOORBELL_S = 0.01  # a consumer waiting this long rings again (a doorbell lost to a race)


def _fence(lock: threading.Lock) -> None:
    """A full barrier: a store before it is visible before a load after it (a lock's
    acquire and release fence on x86 and arm64): the consumer's post before its look at
    POLL, the relay's POLL 0 before its last look at POSTED."""
    with lock:
        pass


class _Relay(asyncio.Protocol):
    """The initiator daemon's part, with no NIC in it."""

    def __init__(self, words: memoryview, bell: int) -> None:
        self.words, self.bell = words, bell
        self.transport: asyncio.Transport | None = None
        self.sent = self.partial = 0
        self.looks = BUSY_LOOKS
        self.lock = threading.Lock()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        loop = asyncio.get_running_loop()
        loop.add_reader(self.bell, self.doorbell)
        self.words[POLL] = 1
        loop.call_soon(self.look)

    def doorbell(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a second ring of one wait: read already
            os.eventfd_read(self.bell)
        self.words[POLL] = 1
        self.look()

    def look(self) -> None:
        words = self.words
        if words[POSTED] != self.sent:
            assert self.transport is not None
            self.sent += 1
            self.transport.write(REQUEST)
            return
        if self.looks > 0:
            self.looks -= 1
            os.sched_yield()
            asyncio.get_running_loop().call_soon(self.look)
            return
        words[POLL] = 0
        _fence(self.lock)
        if words[POSTED] != self.sent:  # posted while POLL still read 1: no doorbell came
            words[POLL] = 1
            self.look()

    def data_received(self, data: bytes) -> None:
        done, self.partial = divmod(self.partial + len(data), MSG)
        if done:
            self.words[DONE] = self.sent  # the completion
            self.looks = BUSY_LOOKS
            asyncio.get_running_loop().call_soon(self.look)


async def _relay(path: str, port: int, bell: int) -> None:
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), PAGE) as page:
        words = memoryview(page).cast("I")
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(lambda: _Relay(words, bell), HOST, port)
        parent = os.getppid()
        try:
            while os.getppid() == parent and not transport.is_closing():  # until orphaned
                await asyncio.sleep(0.2)
        finally:
            transport.close()
            words.release()


def relay(path: str, port: int, bell: int) -> None:
    """``python -m bench.floor relay PAGE PORT FD``: the relay, until its parent goes."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_relay(path, port, bell))


@contextmanager
def _relay_process(path: str, port: int, bell: int) -> Iterator[None]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.floor", "relay", path, str(port), str(bell)],
        pass_fds=(bell,),
        stdin=subprocess.DEVNULL,
        env=module_env(),
    )
    try:
        yield
    finally:
        proc.kill()
        proc.wait(timeout=IO_TIMEOUT)


def round_trips(words: memoryview, bell: int, count: int) -> list[float]:
    """The consumer: ``count`` posts, each waited for; microseconds each."""
    lock, times = threading.Lock(), []
    for _ in range(count):
        posted = (words[POSTED] + 1) % (1 << 32)
        t0 = time.perf_counter()
        words[POSTED] = posted
        _fence(lock)
        rang = t0
        if not words[POLL]:
            os.eventfd_write(bell, 1)
        while words[DONE] != posted:
            os.sched_yield()
            now = time.perf_counter()
            if now - rang > REDOORBELL_S:
                if now - t0 > IO_TIMEOUT:
                    raise RuntimeError("the relay did not complete a request")
                os.eventfd_write(bell, 1)
                rang = now
        times.append((time.perf_counter() - t0) * 1e6)
    return times


@contextmanager
def shape() -> Iterator[tuple[memoryview, int]]:
    """The relay and its echo running: (the shared page's words, the doorbell)."""
    bell = os.eventfd(0, os.EFD_NONBLOCK)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    try:
        with tempfile.NamedTemporaryFile(dir=shm) as f, helper("serve-echo") as port:
            f.truncate(PAGE)
            with mmap.mmap(f.fileno(), PAGE) as page:
                words = memoryview(page).cast("I")
                try:
                    with _relay_process(f.name, port, bell):
                        yield words, bell
                finally:
                    words.release()
    finally:
        os.close(bell)


def measure(iters: int) -> float:
    """The median round trip in microseconds over ``iters`` requests (after a warm-up)."""
    with shape() as (words, bell):
        round_trips(words, bell, WARMUP)
        return statistics.median(round_trips(words, bell, iters))


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.floor``: the floor beside the request-reply RTT."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 4 and args[0] == "relay":
        relay(args[1], int(args[2]), int(args[3]))
        return
    p = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=int, default=5000, help="round trips measured")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    ns = p.parse_args(args)
    if ns.iters < 1:
        p.error("--iters must be at least 1")
    floor = measure(ns.iters)
    rtt, _ = measure_request_reply(1.0)
    if ns.json:
        print(json.dumps({"floor_us": round(floor, 3), "limit_rr_rtt_us": round(rtt, 3)}))
        return
    print(f"window-1 round trip, the data path's shape (median) {floor:8.1f} us")
    print(f"request-reply RTT (64 B, uvloop, median)           {rtt:8.1f} us")


if __name__ == "__main__":
    main()
