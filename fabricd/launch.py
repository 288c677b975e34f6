"""Start fabricd nodes as real processes (the demo, the benchmarks and the tests use this)."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from fabricd import keyfile


def user_key() -> str:
    """The cluster key of the nodes this user starts here (made at first use)."""
    return keyfile.for_this_user(os.path.join(tempfile.gettempdir(), f"datfabric-{os.getuid()}"))


@dataclass
class Node:
    """A running fabricd process."""

    name: str
    host: str
    port: int
    socket: str
    proc: subprocess.Popen[str]
    netns: str | None = None
    log_path: str | None = None

    def log_text(self) -> str:
        """What the daemon logged so far (when started with a log file)."""
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path) as f:
            return f.read()

    @property
    def address(self) -> tuple[str, int]:
        """The node's peer address (what dat_ep_connect takes)."""
        return self.host, self.port

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int:
        """Stop the daemon and return its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def _log_tail(path: str, lines: int = 10) -> str:
    """The last lines a daemon wrote to its log file (its stderr), for an error message."""
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])
    except OSError:
        return ""


def start_node(
    name: str,
    socket_path: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    netns: str | None = None,
    log_level: str = "warning",
    extra: list[str] | None = None,
    log_path: str | None = None,
    timeout: float = 15.0,
    cluster_key: str | None = "",
    module: str = "fabricd.cli",
) -> Node:
    """Start ``fabricd`` (optionally inside a network namespace) and wait for its ready line.

    ``cluster_key`` is the key file its peers must prove: "" is this user's (``user_key``),
    None runs it with --no-cluster-key. ``module`` runs in its place with fabricd's arguments
    (bench.timeline's traced daemon)."""
    key = (
        ["--no-cluster-key"]
        if cluster_key is None
        else ["--cluster-key", cluster_key or user_key()]
    )
    cmd = [
        sys.executable,
        "-m",
        module,
        "--name",
        name,
        "--listen",
        f"{host}:{port}",
        "--socket",
        socket_path,
        "--log-level",
        log_level,
        *key,
        *(extra or []),
    ]
    if netns is not None:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    log = open(log_path, "a") if log_path else None  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=os.environ.copy()
    )
    if log is not None:
        log.close()
    try:
        line = _ready_line(proc, timeout)
    except BaseException:  # interrupted while it starts (Ctrl-C, a TERM): it goes too
        proc.kill()
        proc.wait()
        raise
    if " ready " not in line:
        proc.kill()
        proc.wait()
        said = _log_tail(log_path) if log_path else ""
        raise RuntimeError(
            f"fabricd {name} did not start (exit {proc.returncode}): {line!r}"
            + (f"; the end of its log {log_path}:\n{said}" if said else "")
        )
    peer = line.split("peer=")[1].split()[0]
    bound_host, _, bound_port = peer.rpartition(":")
    shown_host = host if host != "0.0.0.0" else bound_host
    return Node(name, shown_host, int(bound_port), socket_path, proc, netns, log_path)


def _ready_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first line a starting fabricd prints ("" if none within ``timeout`` seconds)."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    line = ""
    try:
        while time.monotonic() < deadline and not line:
            if sel.select(deadline - time.monotonic()):
                line = proc.stdout.readline()
                if not line:
                    break
    finally:
        sel.close()
    return line


def free_port(*hosts: str) -> int:
    """A TCP port free on every one of ``hosts`` (nodes at several loopback addresses share one
    port: a C program names a peer by address alone, and the provider takes its own port)."""
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
    raise OSError("no port is free on all of " + ", ".join(hosts))
