"""ucx_perftest, the peer every figure is set against: one client/server pair over TCP on
loopback, under a timeout, its result row parsed (bench.compare and bench.report use it)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from fabricd.launch import free_port

UCX_PERFTEST = "ucx_perftest"
UCX_ENV = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}
UCX_MB = 1 << 20  # ucx_perftest's MB (UCS_MBYTE)


class RunError(Exception):
    """A benchmark command did not produce a result."""


@dataclass(frozen=True)
class UcxResult:
    """The final line of one ucx_perftest run (times in us, bandwidth in 2^20 B/s)."""

    iters: int
    lat_p50_us: float
    lat_avg_us: float
    lat_overall_us: float
    bw_avg_MiBps: float
    bw_overall_MiBps: float
    rate_avg: float
    rate_overall: float

    @property
    def bw_MBps(self) -> float:
        """Overall bandwidth in 10^6 B/s."""
        return self.bw_overall_MiBps * UCX_MB / 1e6


def _numbers(fields: list[str]) -> list[float] | None:
    try:
        return [float(f) for f in fields]
    except ValueError:
        return None


def parse_ucx(text: str) -> UcxResult:
    """Parse ucx_perftest output: the table (with or without ``-f``) or CSV (``-v``).

    Result rows have eight numbers: iterations, latency 50.0%ile / average / overall (us),
    bandwidth average / overall (MB/s, 2^20), message rate average / overall (msg/s). A row
    may be prefixed with ``Final:`` or ``[thread N]``; the ``Final:`` row wins, else the last.
    """
    final: list[float] | None = None
    last: list[float] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        is_final = line.startswith("Final:")
        if is_final:
            line = line[len("Final:") :]
        elif line.startswith("[thread"):
            line = line.partition("]")[2]
        fields = line.split(",") if "," in line else line.split()
        values = _numbers([f.strip() for f in fields])
        if values is None or len(values) != 8:
            continue
        last = values
        if is_final:
            final = values
    row = final or last
    if row is None:
        raise RunError("no result row in ucx_perftest output")
    return UcxResult(int(row[0]), *row[1:])


def _listening(port: int) -> bool | None:
    """Whether something listens on TCP ``port`` (None: cannot tell without /proc)."""
    hexport = f":{port:04X}"
    found = False
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) > 3 and parts[1].endswith(hexport) and parts[3] == "0A":
                        return True
            found = True
        except OSError:
            continue
    return False if found else None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def run_ucx(test: str, size: int, iters: int, timeout: float, warm: int | None = None) -> UcxResult:
    """One ucx_perftest client/server pair over TCP on loopback; the server is always ended.
    ``warm``: its warm-up operations (``-w``; its default, 10,000, when None)."""
    exe = shutil.which(UCX_PERFTEST)
    if exe is None:
        raise RunError("ucx_perftest not found (Debian package ucx-utils)")
    env = {**os.environ, **UCX_ENV}
    port = free_port("127.0.0.1")
    deadline = time.monotonic() + timeout
    server = subprocess.Popen(
        [exe, "-p", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while (up := _listening(port)) is False:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RunError(f"ucx_perftest server did not listen on {port}")
            time.sleep(0.01)
        if up is None:
            time.sleep(0.5)  # no /proc: give the server a moment
        argv = [exe, "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n", str(iters)]
        if warm is not None:
            argv += ["-w", str(warm)]
        try:
            client = subprocess.run(
                [*argv, "-f"],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
            )
        except subprocess.TimeoutExpired as e:
            raise RunError(f"{test} {size} B timed out after {timeout:.0f} s") from e
        if client.returncode != 0:
            tail = (client.stderr or client.stdout).strip().splitlines()[-3:]
            raise RunError(f"{test} {size} B exit {client.returncode}: {' | '.join(tail)}")
        return parse_ucx(client.stdout)
    finally:
        _stop(server)
