"""The machine's own limits, measured in the same run as a benchmark.

Real processes, real sockets, loopback only. The peer of every measurement is a helper
process (``python -m bench.limits serve-stream 0`` / ``serve-echo 0``) that binds the given
port (0: any free one) and prints ``READY <port>`` on stdout.

- stream: blocking sockets, ``sendall`` of a 1 MiB buffer for about ``seconds``; the receiver
  ``recv_into``\\ s and replies with the byte count; throughput = bytes / elapsed (10^6 B/s).
- request-reply: asyncio Protocols on uvloop at both ends (TCP_NODELAY), 64-byte requests
  each answered by a 64-byte reply; the median round trip at one in flight, and the
  completion rate with 64 in flight.

``python -m bench.limits [--seconds S] [--json]`` prints the three figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import select
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import uvloop

HOST = "127.0.0.1"
CHUNK = 1 << 20  # stream write size
MSG = 64  # request and reply size
PIPELINE = 64  # requests in flight for the pipelined rate
ROUNDS = 5  # stream and pipelined rounds (median taken): placement on the 2 CPUs varies
WARMUP = 200  # round trips before the RTT is measured
MAX_RTT_SAMPLES = 20_000
MAX_PIPELINED = 10_000_000  # requests of one pipelined round at most
MAX_STREAM_CHUNKS = 1 << 17  # 128 GiB: the count bound of one stream round
IO_TIMEOUT = 10.0  # no socket operation may block longer
IDLE_EXIT = 60.0  # a helper with no client for this long exits by itself
COUNT = struct.Struct("!Q")
REQUEST = bytes(MSG)


@dataclass(frozen=True)
class Limits:
    """Loopback ceilings of this machine for one process talking to another."""

    tcp_stream_MBps: float  # raw loopback TCP stream throughput, 1 MiB writes, 10^6 B/s
    rr_rtt_us: float  # median round trip of a 64-byte request and 64-byte reply (uvloop)
    rr_pipelined_per_s: float  # 64-byte request-reply pairs per second, 64 in flight (uvloop)

    def to_json(self) -> dict[str, float]:
        """The figures under the keys benchmarks report them with."""
        return {
            "limit_tcp_stream_MBps": round(self.tcp_stream_MBps, 3),
            "limit_rr_rtt_us": round(self.rr_rtt_us, 3),
            "limit_rr_pipelined_per_s": round(self.rr_pipelined_per_s, 3),
        }


PACE_LOOP = 1_000_000  # additions in a Python loop (27-84 ms of CPU on the VMs so far)


def pace() -> float:
    """The CPU microseconds of a fixed Python loop (the best of three): the same work takes
    half as long again or more in a VM's slow minutes, and twice as long on a slower VM, so
    figures printed beside it can be read."""
    best = float("inf")
    for _ in range(3):
        t0, total = time.thread_time(), 0
        for i in range(PACE_LOOP):
            total += i
        best = min(best, (time.thread_time() - t0) * 1e6)
    return best


# ---------------------------------------------------------------- helper processes (peers)


def _listen(port: int) -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((HOST, port))
    srv.listen(8)
    return srv


def _ready(port: int) -> None:
    print(f"READY {port}", flush=True)


def serve_stream(port: int) -> None:
    """Receive streams one connection at a time; reply to each with its byte count."""
    srv = _listen(port)
    srv.settimeout(IDLE_EXIT)
    _ready(srv.getsockname()[1])
    buf = memoryview(bytearray(CHUNK))
    with srv:
        while True:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                return
            with conn:
                conn.settimeout(IO_TIMEOUT)
                total = 0
                while n := conn.recv_into(buf):
                    total += n
                conn.sendall(COUNT.pack(total))


class _EchoServer(asyncio.Protocol):
    """Answer every complete 64-byte request with its own 64-byte reply (the same bytes)."""

    def __init__(self, activity: list[float]) -> None:
        self.activity = activity
        self.pending = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _nodelay(transport)
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.activity[0] = time.monotonic()
        buf = self.pending + data if self.pending else data
        whole = len(buf) - len(buf) % MSG
        self.pending = buf[whole:]
        if self.transport is None:
            return
        write = self.transport.write
        for off in range(0, whole, MSG):  # one reply per request, as a real server does
            write(buf[off : off + MSG])


async def _serve_echo(port: int) -> None:
    loop = asyncio.get_running_loop()
    activity = [time.monotonic()]
    server = await loop.create_server(lambda: _EchoServer(activity), HOST, port)
    _ready(server.sockets[0].getsockname()[1])
    async with server:
        while time.monotonic() - activity[0] < IDLE_EXIT:
            await asyncio.sleep(1.0)


def serve_echo(port: int) -> None:
    """The request-reply peer, on uvloop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve_echo(port))


def module_env() -> dict[str, str]:
    """This process's environment with this checkout first on PYTHONPATH (for ``python -m``
    helpers started from anywhere)."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


@contextmanager
def helper(kind: str) -> Iterator[int]:
    """Start ``python -m bench.limits KIND 0``, yield its port, and kill it afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.limits", kind, "0"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=module_env(),
        text=True,
    )
    try:
        assert proc.stdout is not None
        poller = select.poll()  # not select(): the pipe may be a descriptor past 1,023
        poller.register(proc.stdout, select.POLLIN)
        line = proc.stdout.readline() if poller.poll(IO_TIMEOUT * 1000) else ""
        if not line.startswith("READY "):
            raise RuntimeError(f"bench.limits {kind} did not start (got {line!r})")
        yield int(line.split()[1])
    finally:
        proc.kill()
        proc.wait(timeout=IO_TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()


# ---------------------------------------------------------------- measurements (this process)


def _stream_round(port: int, seconds: float) -> float:
    """One stream of 1 MiB sendalls for ``seconds``: bytes the peer counted / elapsed."""
    payload = bytes(CHUNK)
    with socket.create_connection((HOST, port), timeout=IO_TIMEOUT) as sock:
        sent = 0
        start = time.perf_counter()
        deadline = start + seconds
        for _ in range(MAX_STREAM_CHUNKS):
            sock.sendall(payload)
            sent += CHUNK
            if time.perf_counter() >= deadline:
                break
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while len(reply) < COUNT.size:
            part = sock.recv(COUNT.size - len(reply))
            if not part:
                raise RuntimeError("stream peer closed without a count")
            reply += part
        elapsed = time.perf_counter() - start
    received: int = COUNT.unpack(reply)[0]
    if received != sent:
        raise RuntimeError(f"stream peer counted {received} bytes, {sent} were sent")
    return received / elapsed / 1e6


def measure_stream(seconds: float) -> float:
    """Median loopback TCP stream throughput in 10^6 B/s over ``ROUNDS`` rounds."""
    with helper("serve-stream") as port:
        return statistics.median(_stream_round(port, seconds / ROUNDS) for _ in range(ROUNDS))


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Client(asyncio.Protocol):
    """Drives request-reply from its callbacks (no coroutine wake-up per reply).

    Ping-pong: on each reply, note the round trip and send the next request. Pipelined: on
    each reply, send a new request (its own write) until the deadline, then drain.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.partial = 0  # bytes of an incomplete reply
        self.sent = 0
        self.replies = 0
        self.pipelined = False
        self.base = 0  # replies before the current run
        self.limit = 0  # replies the current run may take at most
        self.deadline = 0.0
        self.t0 = 0
        self.rtts: list[float] = []
        self.counted: tuple[int, float] = (0, 0.0)  # pipelined: (replies, seconds)
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _nodelay(transport)
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("request-reply peer closed"))

    def send(self, n: int) -> None:
        """Write ``n`` requests, each with its own write."""
        assert self.transport is not None
        for _ in range(n):
            self.transport.write(REQUEST)
        self.sent += n

    def run(self, pipelined: bool, limit: int, seconds: float) -> asyncio.Future[None]:
        """Start a run; the future resolves when it has stopped and nothing is in flight."""
        self.done = asyncio.get_running_loop().create_future()
        self.pipelined, self.base, self.limit = pipelined, self.replies, limit
        self.rtts = []
        self.deadline = time.perf_counter() + seconds
        self.t0 = time.perf_counter_ns()
        self.send(PIPELINE if pipelined else 1)
        return self.done

    def data_received(self, data: bytes) -> None:
        done, self.partial = divmod(self.partial + len(data), MSG)
        if not done:
            return
        now = time.perf_counter_ns()
        self.replies += done
        taken = self.replies - self.base
        if self.pipelined:
            if self.sent - self.base < self.limit and time.perf_counter() < self.deadline:
                self.send(done)
            elif not self.counted[0]:
                self.counted = (taken, (now - self.t0) / 1e9)
        else:
            self.rtts.append((now - self.t0) / 1e3)
            if taken < self.limit and time.perf_counter() < self.deadline:
                self.t0 = time.perf_counter_ns()
                self.send(1)
        if self.replies == self.sent and self.done is not None and not self.done.done():
            self.done.set_result(None)


async def _request_reply(port: int, seconds: float) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    transport, client = await loop.create_connection(_Client, HOST, port)
    try:
        async with asyncio.timeout(2 * seconds + IO_TIMEOUT):  # the bound on all waiting
            await client.run(False, WARMUP, IO_TIMEOUT)
            await client.run(False, MAX_RTT_SAMPLES, seconds / 2)
            rtt = statistics.median(client.rtts)
            rates: list[float] = []
            for _ in range(ROUNDS):
                client.counted = (0, 0.0)
                await client.run(True, MAX_PIPELINED, seconds / 2 / ROUNDS)
                n, elapsed = client.counted
                rates.append(n / elapsed)
        return rtt, statistics.median(rates)
    finally:
        transport.close()


def measure_request_reply(seconds: float) -> tuple[float, float]:
    """(median RTT in us at one in flight, replies/s at 64 in flight), uvloop both ends."""
    with (
        helper("serve-echo") as port,
        asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner,
    ):
        return runner.run(_request_reply(port, seconds))


def measure(seconds: float = 1.0) -> Limits:
    """Measure all three limits; each part runs for about ``seconds``."""
    stream = measure_stream(seconds)
    rtt, rate = measure_request_reply(seconds)
    limits = Limits(stream, rtt, rate)
    for value in (stream, rtt, rate):
        if not (math.isfinite(value) and value > 0):
            raise RuntimeError(f"implausible limit measured: {limits}")
    return limits


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.limits``: print the limits (or run a helper: serve-stream/serve-echo)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] in ("serve-stream", "serve-echo"):
        (serve_stream if args[0] == "serve-stream" else serve_echo)(int(args[1]))
        return
    p = argparse.ArgumentParser(
        prog="python -m bench.limits", description="loopback limits of this machine"
    )
    p.add_argument("--seconds", type=float, default=1.0, help="per measurement (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    ns = p.parse_args(args)
    limits = measure(ns.seconds)
    if ns.json:
        print(json.dumps(limits.to_json()))
        return
    print(f"TCP stream (loopback, 1 MiB writes)      {limits.tcp_stream_MBps:10.1f} MB/s (10^6 B)")
    print(f"request-reply RTT (64 B, uvloop, median) {limits.rr_rtt_us:10.1f} us")
    print(f"request-reply pipelined (64 in flight)   {limits.rr_pipelined_per_s:10.0f} /s")


if __name__ == "__main__":
    main()
