"""What the provider's tests that run C programs between two daemons share."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fabricd.launch import Node, free_port
from tests.conftest import StartNode
from tools.datconf import lines


def conf(tmp_path: Path, socket: str, library: Path) -> dict[str, str]:
    """The environment of a C program that opens IA ``df`` on the node at ``socket``."""
    path = tmp_path / "dat.conf"
    path.write_text(lines("df", socket, library))
    return {**os.environ, "DAT_OVERRIDE": str(path)}


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
    late = ""
    try:
        assert srv.stdout is not None
        while ready_line and not any(ready_line in line for line in seen):
            line = srv.stdout.readline()
            assert line, "the server exited:\n" + "".join(seen)
            seen.append(line)
        cli = subprocess.run(
            client, env=envs[1], capture_output=True, text=True, timeout=120, check=False
        )
        cli_out = cli.stdout + cli.stderr
        try:
            rest, _ = srv.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            late = "(the server had not exited 60 s after the client; killed)\n"
    finally:
        if srv.poll() is None:
            srv.kill()
            rest, _ = srv.communicate()
    srv_out = "".join(seen) + rest + late
    codes = f"server exit {srv.returncode}, client exit {cli.returncode}"
    assert not late and cli.returncode == 0 and srv.returncode == 0, (
        f"{codes}\nserver:\n{srv_out}\nclient:\n{cli_out}"
    )
    return srv_out, cli_out


@contextmanager
def programs() -> Iterator[list[subprocess.Popen[str]]]:
    """C programs a test starts (popen adds them): any still running at the end, stopped or
    not, is killed."""
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()


def popen(
    procs: list[subprocess.Popen[str]], args: list[str], env: dict[str, str]
) -> subprocess.Popen[str]:
    """Start a C program that talks in lines on stdin and stdout; it joins ``procs``."""
    proc = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    return proc


def line(proc: subprocess.Popen[str]) -> str:
    """The program's next output line."""
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def say(proc: subprocess.Popen[str], text: str = "go") -> None:
    """A line to the program's stdin."""
    assert proc.stdin is not None
    proc.stdin.write(text + "\n")
    proc.stdin.flush()
