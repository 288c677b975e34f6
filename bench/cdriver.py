"""The C driver under load: provider/bench/post_reap (RDMA Writes through libdatfabric from a
C program that polls, as ucx_perftest does) against two fresh local nodes."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator

from fabricd.launch import free_port, start_node
from tools.datconf import LIBRARY, lines

POST_REAP = LIBRARY.parent / "post_reap"
RATE = re.compile(r"(\d+) B RDMA Write, window (\d+), (\d+) operations: (\d+) ops/s")
"""post_reap's first line: size, window, operations, rate."""


class Unavailable(Exception):
    """The provider and its bench program are not built (``make provider``), or the run failed."""


@contextlib.contextmanager
def nodes() -> Iterator[str]:
    """Two nodes on loopback (IAs ``dfa`` and ``dfb``); yields the dat.conf naming them."""
    if not POST_REAP.exists():
        raise Unavailable("needs the provider and its bench program (make provider)")
    with tempfile.TemporaryDirectory(prefix="datfabric-cdriver-") as tmp:
        port = free_port("127.0.0.1", "127.0.0.2")
        a = start_node("cd-a", os.path.join(tmp, "a.sock"), "127.0.0.1", port)
        b = start_node("cd-b", os.path.join(tmp, "b.sock"), "127.0.0.2", port)
        try:
            conf = os.path.join(tmp, "dat.conf")
            with open(conf, "w", encoding="utf-8") as f:
                f.write(lines("dfa", a.socket, LIBRARY) + lines("dfb", b.socket, LIBRARY))
            yield conf
        finally:
            a.stop()
            b.stop()


def post_reap(conf: str, size: int, window: int, iters: int, timeout: float) -> str:
    """One run of post_reap (``dfb`` writes into ``dfa``); what it printed, less its PASSED."""
    done = subprocess.run(
        [str(POST_REAP), "dfa", "dfb", str(size), str(window), str(iters)],
        env={**os.environ, "DAT_OVERRIDE": conf},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0 or not done.stdout.endswith("PASSED\n"):
        raise Unavailable(f"post_reap exit {done.returncode}: {done.stdout}{done.stderr}".strip())
    return done.stdout.removesuffix("PASSED\n").rstrip()


def write_rate(size: int, window: int, iters: int, timeout: float) -> float:
    """RDMA Writes per second a C program reaches through libdatfabric (fresh nodes)."""
    with nodes() as conf:
        out = post_reap(conf, size, window, iters, timeout)
    found = RATE.search(out)
    if found is None:
        raise Unavailable(f"post_reap printed no rate: {out!r}")
    return float(found.group(4))
