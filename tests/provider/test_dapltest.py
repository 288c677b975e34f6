"""Debian's dapltest (dapl2-utils), unmodified, as server and client on two daemons.

One server (`dapltest -T S`) serves every client run of the module's tests; `dapltest -T Q`
ends it, and it must exit cleanly.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricd.launch import Node, free_port, start_node
from tests.provider.support import envs_for

pytestmark = pytest.mark.skipif(
    shutil.which("dapltest") is None, reason="dapltest (Debian's dapl2-utils) is not installed"
)

SERVER_HOST = "127.0.0.1"


class Pair:
    """The two nodes, the client's environment and the running server."""

    def __init__(self, nodes: tuple[Node, Node], client_env: dict[str, str]) -> None:
        self.nodes = nodes
        self.client_env = client_env

    def client(self, test: str, *args: str, timeout: float = 180) -> str:
        """Run ``dapltest -T test`` against the server (options before the OPs)."""
        done = subprocess.run(
            ["dapltest", "-T", test, "-s", SERVER_HOST, "-D", "df", *args],
            env=self.client_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
        return out


@pytest.fixture(scope="module")
def pair(build: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("dapltest")
    port = free_port(SERVER_HOST, "127.0.0.2")
    nodes = (
        start_node("dl-a", str(tmp / "a.sock"), SERVER_HOST, port, log_path=str(tmp / "a.log")),
        start_node("dl-b", str(tmp / "b.sock"), "127.0.0.2", port, log_path=str(tmp / "b.log")),
    )
    envs = envs_for(tmp, build, *nodes)
    server = subprocess.Popen(
        ["dapltest", "-T", "S", "-D", "df"],
        env=envs[0],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    p = Pair(nodes, envs[1])
    try:
        yield p
        p.client("Q")
        out, _ = server.communicate(timeout=60)
        assert server.returncode == 0, out
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
        for node in nodes:
            node.stop()


@pytest.mark.parametrize(
    "args",
    [
        ["-i", "100", "client", "SR", "4096", "server", "SR", "4096"],
        ["-i", "100", "-V", "client", "SR", "1024", "3", "server", "SR", "1024", "3"],
        ["-i", "100", "-V", "client", "RW", "4096", "2", "client", "SR", "256",
         "server", "SR", "256"],
        ["-i", "100", "-V", "client", "RR", "8192", "1", "server", "RW", "2048", "4",
         "client", "SR", "512", "-f", "server", "SR", "512", "-f"],
        ["-i", "50", "-t", "3", "-w", "2", "-V", "client", "SR", "1024", "server", "SR", "1024",
         "client", "RW", "4096", "server", "RR", "4096"],
        ["-i", "100", "-P", "-V", "client", "SR", "64", "server", "SR", "64",
         "client", "RW", "65536"],
    ],
    ids=["sr", "sr-3seg-V", "rw-V", "rr-rw-f-V", "threads-eps-V", "polling-V"],
)  # fmt: skip
def test_transactions(pair: Pair, args: list[str]) -> None:
    """dapltest -T T: SR, RW and RR transactions of several segment sizes and counts, with
    validation, several threads and EPs, and polling."""
    out = pair.client("T", *args)
    assert "Total WQE" in out and "Error" not in out, out


@pytest.mark.parametrize(
    "args",
    [
        ["-i", "2000", "-p", "1", "-m", "b", "RW", "4", "1"],
        ["-i", "2000", "-p", "1", "-m", "p", "RW", "4", "1"],
        ["-i", "500", "-p", "16", "-m", "b", "RW", "65536", "1"],
        ["-i", "500", "-p", "16", "-m", "p", "RR", "65536", "1"],
        ["-i", "1000", "-p", "4", "-m", "b", "RR", "4096", "2"],
    ],
    ids=["lat-blocking", "lat-polling", "bw-rw", "bw-rr-polling", "rr-blocking-2seg"],
)
def test_performance(pair: Pair, args: list[str]) -> None:
    """dapltest -T P: RDMA Write and Read, blocking and polling, latency and bandwidth."""
    out = pair.client("P", *args)
    assert "Operation Throughput" in out and "Error" not in out, out
