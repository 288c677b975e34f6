"""Debian's dtest and dtestcm (dapl2-utils), unmodified, between two daemons over libdatfabric.

The two nodes listen on one port at two addresses (127.0.0.1 and 127.0.0.2, or two network
namespaces): dtest's client resolves the server's host name with no port, and the provider
takes its own node's port for it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from client.api import Ia
from fabricd.launch import Node
from proto.constants import CloseFlags, EventNumber, MemPriv, MemType
from tests.conftest import StartNode
from tests.integration import netns
from tests.integration.flows import WAIT_US, wait_event
from tests.provider.test_provider import build, conf

__all__ = ["build"]  # the module fixture, shared

pytestmark = pytest.mark.skipif(
    shutil.which("dtest") is None or shutil.which("dtestcm") is None,
    reason="dtest and dtestcm (Debian's dapl2-utils) are not installed",
)


DTEST_READY = "waiting for client connection"  # dtest's server sends its address over TCP


def free_port(*hosts: str) -> int:
    """A TCP port free on every one of ``hosts``."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((hosts[0], 0))
            port: int = s.getsockname()[1]
        try:
            for host in hosts[1:]:
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on all hosts")


def run_pair(
    server: list[str],
    client: list[str],
    envs: tuple[dict[str, str], dict[str, str]],
    ready_line: str = "",
) -> tuple[str, str]:
    """Start the server, then (once it printed ``ready_line``) the client; both must exit 0.
    Their outputs."""
    srv = subprocess.Popen(
        server, env=envs[0], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: list[str] = []
    try:
        assert srv.stdout is not None
        while ready_line and not any(ready_line in line for line in seen):
            line = srv.stdout.readline()
            assert line, "the server exited:\n" + "".join(seen)
            seen.append(line)
        cli = subprocess.run(
            client, env=envs[1], capture_output=True, text=True, timeout=120, check=False
        )
        rest, _ = srv.communicate(timeout=60)
        srv_out = "".join(seen) + rest
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.communicate()
    cli_out = cli.stdout + cli.stderr
    assert cli.returncode == 0 and srv.returncode == 0, f"server:\n{srv_out}\nclient:\n{cli_out}"
    return srv_out, cli_out


@contextmanager
def loopback_pair(start: StartNode, tmp_path: Path) -> Iterator[tuple[Node, Node, str]]:
    port = free_port("127.0.0.1", "127.0.0.2")
    a = start("dt-a", host="127.0.0.1", port=port)
    b = start("dt-b", host="127.0.0.2", port=port)
    yield a, b, "127.0.0.1"


def envs_for(tmp_path: Path, build_dir: Path, a: Node, b: Node) -> tuple[dict[str, str], ...]:
    lib = build_dir / "libdatfabric.so"
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    return conf(tmp_path / "a", a.socket, lib), conf(tmp_path / "b", b.socket, lib)


@pytest.mark.parametrize("options", [[], ["-p"], ["-B", "1"], ["-B", "50", "-b", "4096"]], ids=str)
def test_dtest_on_loopback(
    build: Path, start: StartNode, tmp_path: Path, options: list[str]
) -> None:
    """dtest's whole lifecycle (private data, RMR exchange, RDMA Write, Read, ping-pong,
    disconnect) passes on both sides, blocking and polling, with several burst sizes."""
    with loopback_pair(start, tmp_path) as (a, b, server_host):
        envs = envs_for(tmp_path, build, a, b)
        srv, cli = run_pair(
            ["dtest", "-P", "df", "-s", *options],
            ["dtest", "-P", "df", "-h", server_host, *options],
            (envs[0], envs[1]),
            DTEST_READY,
        )
    for out in (srv, cli):
        assert "DAPL Test Complete. PASSED" in out, out


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
def test_dtest_across_network_namespaces(build: Path, start: StartNode, tmp_path: Path) -> None:
    """The same across two hosts (network namespaces joined by a veth pair)."""
    with netns.two_hosts(7) as hosts:
        port = 47000
        a = start("ns-a", host=hosts.addr[0], port=port, netns=hosts.ns[0])
        b = start("ns-b", host=hosts.addr[1], port=port, netns=hosts.ns[1])
        envs = envs_for(tmp_path, build, a, b)
        exec_in = [["ip", "netns", "exec", ns] for ns in hosts.ns]
        srv, cli = run_pair(
            [*exec_in[0], "dtest", "-P", "df", "-s"],
            [*exec_in[1], "dtest", "-P", "df", "-h", hosts.addr[0]],
            (envs[0], envs[1]),
            DTEST_READY,
        )
    for out in (srv, cli):
        assert "DAPL Test Complete. PASSED" in out, out


def test_dtestcm_connections(build: Path, start: StartNode, tmp_path: Path) -> None:
    """dtestcm connects and disconnects many endpoints; its CPS figure is printed."""
    count = "1000"
    with loopback_pair(start, tmp_path) as (a, b, server_host):
        envs = envs_for(tmp_path, build, a, b)
        _, cli = run_pair(
            ["dtestcm", "-P", "df", "-s", "-c", count],
            ["dtestcm", "-P", "df", "-h", server_host, "-c", count],
            (envs[0], envs[1]),
        )
    assert f"ALL {count} CONNECTED" in cli or f"{count} CONNECTED" in cli, cli
    cps = re.search(r"CPS\s*[=:]?\s*([\d.]+)", cli)
    assert cps, cli
    print(f"dtestcm -c {count}: {cps.group(0)}")


DISCONNECTED = 0x4005  # DAT_CONNECTION_EVENT_DISCONNECTED
BROKEN = 0x4006  # DAT_CONNECTION_EVENT_BROKEN


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def _read_memory(pid: int, address: int, length: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(length)


def _popen(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _say(proc: subprocess.Popen[str], line: str = "go") -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def test_rdma_write_lands_in_a_stopped_c_program(
    build: Path, start: StartNode, tmp_path: Path
) -> None:
    """The one-sided property for C programs: a C program's RDMA Write lands in another C
    program's malloc'd buffer while that program is stopped (SIGSTOP); the bytes are in its
    memory before it runs again."""
    with loopback_pair(start, tmp_path) as (a, b, host):
        envs = envs_for(tmp_path, build, a, b)
        peer = str(build / "peer")
        tgt = _popen([peer, "df", "target", "4242"], envs[0])
        wr: subprocess.Popen[str] | None = None
        try:
            ready = _line(tgt).split()
            assert ready[:1] == ["READY"], ready
            address, _, length = (int(v) for v in ready[1:])
            wr = _popen([peer, "df", "write", host, "4242", *ready[1:]], envs[1])
            assert _line(wr) == "CONNECTED"
            os.kill(tgt.pid, signal.SIGSTOP)
            _say(wr)
            assert _line(wr) == "WRITTEN 0"
            want = bytes((i * 13 + 1) & 0xFF for i in range(length))
            assert _read_memory(tgt.pid, address, length) == want, "not in the stopped program"
            os.kill(tgt.pid, signal.SIGCONT)
            _say(tgt, "check")
            assert wr.wait(timeout=60) == 0 and _line(wr) == "PASSED"
            assert _line(tgt) == f"ENDED {DISCONNECTED:#x}"
            assert tgt.wait(timeout=60) == 0 and _line(tgt) == "PASSED"
        finally:
            for proc in (tgt, wr):
                if proc is not None and proc.poll() is None:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.kill()
                    proc.wait()


def test_killed_c_program_breaks_only_its_connection(
    build: Path, start: StartNode, tmp_path: Path
) -> None:
    """A C program killed in the middle of a stream of RDMA Writes: its peer sees the
    connection end, both daemons live on, and no shared-memory segment of it is left."""
    with loopback_pair(start, tmp_path) as (a, b, host):
        envs = envs_for(tmp_path, build, a, b)
        peer = str(build / "peer")
        tgt = _popen([peer, "df", "target", "4243"], envs[0])
        wr: subprocess.Popen[str] | None = None
        try:
            ready = _line(tgt).split()
            wr = _popen([peer, "df", "write-loop", host, "4243", *ready[1:]], envs[1])
            assert _line(wr) == "CONNECTED"
            _say(wr)
            assert _line(wr) == "WRITTEN 0"
            wr.kill()
            wr.wait()
            _say(tgt, "skip")
            assert _line(tgt) in (f"ENDED {DISCONNECTED:#x}", f"ENDED {BROKEN:#x}")
            assert tgt.wait(timeout=60) == 0 and _line(tgt) == "PASSED"
            assert a.proc.poll() is None and b.proc.poll() is None
            left = [n for n in os.listdir("/dev/shm") if n.startswith(f"datfabric-{wr.pid}-")]
            assert left == [], left
        finally:
            for proc in (tgt, wr):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()


def _pattern(length: int) -> bytes:
    return bytes((i * 13 + 1) & 0xFF for i in range(length))


def test_python_program_writes_into_a_c_program(
    build: Path, start: StartNode, tmp_path: Path
) -> None:
    """A mixed pair, Python to C: a Python consumer connects to a C program's PSP and
    RDMA-Writes into its malloc'd buffer; the C program finds the bytes and sees the
    disconnect."""
    with loopback_pair(start, tmp_path) as (a, b, host):
        envs = envs_for(tmp_path, build, a, b)
        tgt = _popen([str(build / "peer"), "df", "target", "4244"], envs[0])
        try:
            address, rmr_context, length = (int(v) for v in _line(tgt).split()[1:])
            with Ia(b.socket) as ia:
                pz = ia.pz_create()
                evd = ia.evd_create(16)
                ep = ia.ep_create(pz, evd, evd, evd)
                buf = ia.alloc(length)
                buf.view[:] = _pattern(length)
                lmr = ia.lmr_create(MemType.VIRTUAL, buf, length, pz, MemPriv.ALL)
                ep.connect((host, a.port), 4244, WAIT_US)
                wait_event(evd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
                ep.post_rdma_write([lmr.triplet()], 5, [address, length, rmr_context])
                done = wait_event(evd, EventNumber.DTO_COMPLETION_EVENT)
                assert (done.cookie, done.status) == (5, 0)
                _say(tgt, "check")
                ep.disconnect(CloseFlags.GRACEFUL)
                wait_event(evd, EventNumber.CONNECTION_EVENT_DISCONNECTED)
            assert _line(tgt) == f"ENDED {DISCONNECTED:#x}"
            assert tgt.wait(timeout=60) == 0 and _line(tgt) == "PASSED"
        finally:
            if tgt.poll() is None:
                tgt.kill()
                tgt.wait()


def test_c_program_writes_into_a_python_program(
    build: Path, start: StartNode, tmp_path: Path
) -> None:
    """A mixed pair, C to Python: a C program connects to a Python consumer's PSP and
    RDMA-Writes into its buffer; the Python side sees the bytes and the disconnect."""
    with loopback_pair(start, tmp_path) as (a, b, host), Ia(a.socket) as ia:
        length = 65536
        pz = ia.pz_create()
        evd = ia.evd_create(16)
        ep = ia.ep_create(pz, evd, evd, evd)
        buf = ia.alloc(length)
        lmr = ia.lmr_create(MemType.VIRTUAL, buf, length, pz, MemPriv.ALL)
        ia.psp_create(4245, evd)
        address, _, rmr_context = lmr.remote()
        envs = envs_for(tmp_path, build, a, b)
        args = [host, "4245", str(address), str(rmr_context), str(length)]
        wr = _popen([str(build / "peer"), "df", "write", *args], envs[1])
        try:
            request = wait_event(evd, EventNumber.CONNECTION_REQUEST_EVENT)
            ia.cr(request).accept(ep)
            wait_event(evd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
            assert _line(wr) == "CONNECTED"
            _say(wr)
            assert _line(wr) == "WRITTEN 0"
            assert bytes(buf.view) == _pattern(length)
            wait_event(evd, EventNumber.CONNECTION_EVENT_DISCONNECTED)
            assert wr.wait(timeout=60) == 0 and _line(wr) == "PASSED"
        finally:
            if wr.poll() is None:
                wr.kill()
                wr.wait()
