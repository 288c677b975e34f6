"""The container engine this machine has: a Docker engine that answers, an installed dockerd
started here (and stopped again), or podman, with a compose command (tools.containers uses it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.steps import Missing, cache_dir, run


def _works(argv: Sequence[str], timeout: float = 30) -> bool:
    try:
        return run(argv, check=False, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# --- the engine ------------------------------------------------------------------------------


@dataclass
class Engine:
    """A container engine's CLI and compose command, and the daemon started here, if any."""

    cli: list[str]
    compose: list[str]
    started_pid: int | None = None  # a dockerd this process (or an earlier `up`) started

    @property
    def name(self) -> str:
        return " ".join(self.compose)

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        return run([*self.cli, *args], check=check, timeout=timeout)

    def has_image(self, name: str) -> bool:
        return self("image", "inspect", name, check=False, timeout=60).returncode == 0

    def stop(self) -> None:
        """Stop the dockerd started here (it stops its containerd) and wait until it is gone."""
        if self.started_pid is None:
            return
        stop_dockerd(self.started_pid)
        self.started_pid = None


def _compose_for(cli: str) -> list[str] | None:
    if _works([cli, "compose", "version"]):
        return [cli, "compose"]
    standalone = {"docker": "docker-compose", "podman": "podman-compose"}[cli]
    if shutil.which(standalone) and _works([standalone, "version"]):
        return [standalone]
    return None


def pid_alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def start_dockerd(dockerd: str) -> int:
    """Start dockerd in its own session; return its pid once the engine answers.

    No default bridge and no iptables rules: compose makes its own networks, and nothing is left
    in the host's network configuration when the daemon stops.
    """
    log_path = cache_dir() / "dockerd.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [dockerd, "--bridge=none", "--iptables=false", "--ip-masq=false", "--log-level=warn"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-5:]
            raise Missing(f"dockerd exited with {proc.returncode}: " + " | ".join(tail))
        if _works(["docker", "info"], timeout=10):
            return proc.pid
        time.sleep(0.2)
    stop_dockerd(proc.pid)
    raise Missing(f"dockerd did not answer within 60 s (log: {log_path})")


def stop_dockerd(pid: int) -> None:
    """SIGTERM a dockerd started here; wait until it and everything it started are gone."""
    started = [pid, *descendants(pid), *docker_shims()]  # its containerd, and container shims
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)  # our child: reap it (an earlier run's dockerd is not)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = [p for p in started if pid_alive(p)]
        if not alive:
            return
        time.sleep(0.2)
    raise RuntimeError(f"dockerd {pid}: processes {alive} did not stop within 60 s")


def docker_shims() -> list[int]:
    """containerd shims of Docker's containers: they outlive their container by a moment."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if os.path.basename(argv[0]).startswith(b"containerd-shim") and b"moby" in argv:
                    found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children, ...)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


def find_engine(start: bool = True) -> Engine:
    """The engine to use, started if installed and stopped; Missing says what is lacking.

    DATFABRIC_ENGINE=docker or =podman considers that one only.
    """
    only = os.environ.get("DATFABRIC_ENGINE", "")
    lacking: list[str] = []
    if only == "podman":
        pass
    elif shutil.which("docker"):
        compose = _compose_for("docker")
        if compose is None:
            lacking.append("compose for docker (neither `docker compose` nor `docker-compose`)")
        elif _works(["docker", "info"]):
            return Engine(["docker"], compose)
        else:
            dockerd = shutil.which("dockerd")
            if dockerd is None:
                lacking.append("a Docker engine (the docker client is there, dockerd is not)")
            elif os.geteuid() != 0:
                lacking.append("a running Docker engine (starting dockerd needs root)")
            elif start:
                return Engine(["docker"], compose, start_dockerd(dockerd))
            else:
                lacking.append("a running Docker engine")
    else:
        lacking.append("docker")
    if only == "docker":
        pass
    elif shutil.which("podman"):
        compose = _compose_for("podman")
        if compose is not None and _works(["podman", "info"]):
            return Engine(["podman"], compose)
        lacking.append("podman-compose" if compose is None else "a working podman (`podman info`)")
    raise Missing(
        "no container engine to use: missing "
        + "; ".join(lacking)
        + ". On Debian, as root: apt-get install docker.io docker-compose debootstrap iptables"
        + " (`make container-deps` does this)."
    )
