"""The C driver under load: provider/bench/post_reap (RDMA Writes or Sends through libdatfabric
from a C program that polls, as ucx_perftest does) against two fresh local nodes."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from bench import perfsplit
from bench.nodes import cpus_args
from bench.proc import Usage, usage
from fabricd.launch import free_port, start_node
from tools.datconf import LIBRARY, lines

POST_REAP = LIBRARY.parent / "post_reap"
RATE = re.compile(r"(\d+) B (?:RDMA Write|Send), window (\d+), (\d+) operations: (\d+) ops/s")
"""post_reap's rate line, the first after its timed loop: size, window, operations, rate."""
OPS = ("write", "send")
"""What post_reap posts: RDMA Writes, or Sends into receives it posts on the other side."""


class Unavailable(Exception):
    """The provider and its bench program are not built (``make provider``), or the run failed."""


@dataclass(frozen=True)
class Nodes:
    """Two fresh nodes: the dat.conf naming their IAs (``dfa``, the target, and ``dfb``, the
    initiator) and their daemons' process ids, by the name bench.breakdown prints."""

    conf: str
    daemons: dict[str, int]


@contextlib.contextmanager
def nodes(cpus: tuple[str, str] = ("", "")) -> Iterator[Nodes]:
    """Two nodes on loopback, for the length of the block (``cpus``: the program's daemon's and
    its peer's CPU lists, as fabricctl bench --daemon-cpus gives them)."""
    if not POST_REAP.exists():
        raise Unavailable("needs the provider and its bench program (make provider)")
    with tempfile.TemporaryDirectory(prefix="datfabric-cdriver-") as tmp:
        port = free_port("127.0.0.1", "127.0.0.2")
        a = start_node(
            "cd-a", os.path.join(tmp, "a.sock"), "127.0.0.1", port, extra=cpus_args(cpus[1])
        )
        b = start_node(
            "cd-b", os.path.join(tmp, "b.sock"), "127.0.0.2", port, extra=cpus_args(cpus[0])
        )
        try:
            conf = os.path.join(tmp, "dat.conf")
            with open(conf, "w", encoding="utf-8") as f:
                f.write(lines("dfa", a.socket, LIBRARY) + lines("dfb", b.socket, LIBRARY))
            yield Nodes(conf, {"its daemon": b.proc.pid, "peer daemon": a.proc.pid})
        finally:
            a.stop()
            b.stop()


def post_reap(
    conf: str,
    size: int,
    window: int,
    iters: int,
    timeout: float,
    watch: dict[str, int] | None = None,
    op: str = "write",
    cq_mod: int = 1,
    perf_data: str = "",
) -> str:
    """One run of post_reap (``dfb`` writes or sends ``op`` into ``dfa``, one request in
    ``cq_mod`` signalled): what it printed, less its PASSED; then, for the program itself and
    each process of ``watch`` (name: pid), the CPU it spent per operation over the timed loop
    (bench.proc), and with ``perf_data`` (a path for perf record's file) that CPU split by the
    code it ran (bench.perfsplit; PerfFailed if perf failed)."""
    argv = [str(POST_REAP), "dfa", "dfb", str(size), str(window), str(iters), op, str(cq_mod)]
    env = {**os.environ, "DAT_OVERRIDE": conf}
    recording = perfsplit.Recording(perf_data) if perf_data else None  # ready before the run
    with (
        recording or contextlib.nullcontext(),
        subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc,
    ):
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            watched = {"C consumer": proc.pid, **(watch or {})}
            out, usage_lines = _timed(proc, iters, watched, recording)
            err = proc.stderr.read() if proc.stderr else ""
        finally:
            timer.cancel()
    if proc.returncode != 0 or not out.endswith("PASSED\n"):
        raise Unavailable(f"post_reap exit {proc.returncode}: {out}{err}".strip())
    return "\n".join([out.removesuffix("PASSED\n").rstrip(), *usage_lines])


def _timed(
    proc: subprocess.Popen[str],
    iters: int,
    watch: dict[str, int],
    recording: perfsplit.Recording | None = None,
) -> tuple[str, list[str]]:
    """post_reap's output (less its "timing" line) and the processes' CPU between that line
    and the rate line that ends the timed loop (``recording``: perf samples them meanwhile,
    and each one's CPU is split by code, a line more a process)."""
    out: list[str] = []
    before: dict[str, Usage] = {}
    spent: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("timing "):
            before = {name: usage(pid) for name, pid in watch.items()}
            if recording is not None:  # ready since before the program started
                recording.resume()
            continue
        if before and RATE.match(line):
            after = {name: usage(pid) for name, pid in watch.items()}
            spent = [after[name].line(name, before[name], iters) for name in watch]
            shares = recording.stop() if recording is not None else {}
            spent += perfsplit.lines(watch, before, after, shares, iters)
        out.append(line)
    proc.wait()
    return "".join(out), spent


def rate(
    size: int,
    window: int,
    iters: int,
    timeout: float,
    op: str = "write",
    cq_mod: int = 1,
    cpus: tuple[str, str] = ("", ""),
) -> float:
    """RDMA Writes (or Sends: ``op``) per second a C program reaches through libdatfabric
    (fresh nodes, pinned as ``nodes`` says; one request in ``cq_mod`` signalled)."""
    with nodes(cpus) as pair:
        out = post_reap(pair.conf, size, window, iters, timeout, op=op, cq_mod=cq_mod)
    found = RATE.search(out)
    if found is None:
        raise Unavailable(f"post_reap printed no rate: {out!r}")
    return float(found.group(4))
