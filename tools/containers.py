"""Run the compose topology (docker-compose.yml) on whatever container engine this machine has.

    python -m tools.containers demo   # image, topology, the demo and dtest, down (make containers)
    python -m tools.containers up     # image and topology, left running (make containers-up)
    python -m tools.containers down   # the topology gone, the engine stopped if started here
    python -m tools.containers image  # only the image (datfabric:local)

The engine: a Docker engine that answers; else an installed dockerd, started here (and stopped
again when done, by `demo` and `down`); else podman. Compose: `docker compose`, `docker-compose`,
`podman compose` or `podman-compose`. When none fits, it says what is missing and exits 2.

The image builds with nothing fetched inside the build: the project and its dependencies are
wheels made here on the host, Debian's C DAT programs .deb files fetched here, the C provider
built here (tools/context.py; the downloads kept in a cache directory between runs), and the base
image is the stock Python image when a registry gives it, else one made from Debian's archive
with debootstrap and `docker import` (also kept, as a tarball, for when the engine's store is
wiped). Every step prints how long it took.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fabricd import keyfile
from tools.engine import Engine, find_engine, pid_alive
from tools.image import IMAGE, ensure_image
from tools.steps import Missing, cache_dir, run, say, step

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROJECT = "datfabric"
SOCKET_DIR = "/run/datfabric"
PROJECT_LABEL = "com.docker.compose.project"
WORKLOAD_LABEL = "org.datfabric.project"  # on workload containers started beside a topology


# --- a topology ------------------------------------------------------------------------------


@dataclass
class Topology:
    """One compose project of docker-compose.yml on an engine, plus workloads started beside it."""

    engine: Engine
    project: str = PROJECT
    compose_file: Path = COMPOSE_FILE
    workloads: list[str] = field(default_factory=list)

    def compose(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        if "DATFABRIC_CLUSTER_KEY" not in os.environ:  # the file the compose secret names
            with contextlib.suppress(FileExistsError):
                keyfile.generate(str(self.compose_file.parent / ".cluster.key"))
        argv = [*self.engine.compose, "-p", self.project, "-f", str(self.compose_file), *args]
        return run(argv, check=check, timeout=timeout)

    def up(self, services: Sequence[str] = ()) -> None:
        """Start services (all by default) without building; wait until the nodes are healthy."""
        self.compose("up", "-d", "--no-build", *services)
        nodes = [s for s in services if s.startswith("node-")] or self.nodes()
        self.wait_healthy(nodes)

    def nodes(self) -> list[str]:
        import yaml  # the test extra has it; only `up` with no services named needs it

        services = yaml.safe_load(self.compose_file.read_text())["services"]
        return sorted(n for n, s in services.items() if s.get("command", [""])[0] == "fabricd")

    def container(self, service: str) -> str:
        """The id of a service's container."""
        ids = self.compose("ps", "-a", "-q", service).stdout.split()
        if len(ids) != 1:
            raise RuntimeError(f"{service}: {len(ids)} containers")
        return ids[0]

    def inspect(self, container: str) -> dict[str, object]:
        data: list[dict[str, object]] = json.loads(self.engine("inspect", container).stdout)
        return data[0]

    def wait_healthy(self, services: Sequence[str], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        for service in services:
            cid = self.container(service)
            while True:
                state = self.engine("inspect", "-f", "{{.State.Health.Status}}", cid).stdout.strip()
                if state == "healthy":
                    break
                if time.monotonic() > deadline:
                    logs = self.engine("logs", cid, check=False).stderr
                    raise RuntimeError(f"{service} is {state} after {timeout} s:\n{logs}")
                time.sleep(0.2)

    def volume(self, service: str) -> str:
        """The volume mounted at the node's socket directory."""
        mounts = self.inspect(self.container(service))["Mounts"]
        assert isinstance(mounts, list)
        for mount in mounts:
            if mount["Destination"] == SOCKET_DIR:
                return str(mount["Name"])
        raise RuntimeError(f"{service} has no volume at {SOCKET_DIR}")

    def network(self) -> str:
        """The user-defined network the nodes share."""
        out = self.engine(
            "network", "ls", "-q", "--filter", f"label={PROJECT_LABEL}={self.project}",
            "--format", "{{.Name}}",
        ).stdout.split()  # fmt: skip
        if len(out) != 1:
            raise RuntimeError(f"{self.project}: networks {out}")
        return out[0]

    def run_workload(
        self, node: str, name: str, argv: Sequence[str], mounts: Sequence[str] = ()
    ) -> str:
        """A consumer container on ``node``: its IPC namespace and socket volume, no network."""
        full = f"{self.project}-{name}"
        options = [f"--volume={m}" for m in mounts]
        self.workloads.append(full)
        self.engine(
            "run", "-d", "--name", full, "--label", f"{WORKLOAD_LABEL}={self.project}",
            "--ipc", f"container:{self.container(node)}", "--network", "none",
            "--volume", f"{self.volume(node)}:{SOCKET_DIR}", *options, IMAGE, *argv,
        )  # fmt: skip
        return full

    def wait(self, container: str, timeout: float = 120) -> int:
        """Wait for a container to exit; its exit code."""
        return int(self.engine("wait", container, timeout=timeout).stdout.strip())

    def logs(self, container: str) -> str:
        proc = self.engine("logs", container, check=False)
        return proc.stdout + proc.stderr

    def down(self) -> dict[str, list[str]]:
        """Remove the workloads, then every container, network and volume of the project.

        Returns what compose's own `down` left (removed then by label): empty when it did all.
        """
        for name in self.workloads:
            self.engine("rm", "-f", "-v", name, check=False)
        self.workloads.clear()
        done = self.compose("down", "-v", "--remove-orphans", "--timeout", "5", check=False)
        left = self.leftovers()
        if any(left.values()):  # compose failed or missed some: remove them by label
            say(f"compose down left {left}: removing by label ({done.stderr.strip()[-200:]})")
            if left["containers"]:
                self.engine("rm", "-f", "-v", *left["containers"], check=False)
            if left["volumes"]:
                self.engine("volume", "rm", "-f", *left["volumes"], check=False)
            if left["networks"]:
                self.engine("network", "rm", *left["networks"], check=False)
        return left

    def leftovers(self) -> dict[str, list[str]]:
        """What of this project the engine still has, by kind (empty lists when down)."""
        mine = f"label={PROJECT_LABEL}={self.project}"
        out = {
            "containers": self.engine("ps", "-aq", "--filter", mine).stdout.split()
            + self.engine(
                "ps", "-aq", "--filter", f"label={WORKLOAD_LABEL}={self.project}"
            ).stdout.split(),
            "volumes": self.engine("volume", "ls", "-q", "--filter", mine).stdout.split(),
            "networks": self.engine("network", "ls", "-q", "--filter", mine).stdout.split(),
        }
        return out


# --- the command line ------------------------------------------------------------------------


def _state_path() -> Path:
    return cache_dir() / "state.json"


def _engine_from_state(start: bool) -> Engine:
    engine = find_engine(start=start)
    with contextlib.suppress(OSError, ValueError, KeyError):
        pid = int(json.loads(_state_path().read_text())["dockerd"])
        if pid_alive(pid) and Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd":
            engine.started_pid = pid
    return engine


DEMOS = {  # what `demo` runs, in order: services and the line each must print
    "the Python demo": {"demo-server": "server: memory verified", "demo-client": "RDMA Read"},
    "Debian's dtest (C, over libdatfabric)": {
        "dtest-server": "DAPL Test Complete. PASSED",
        "dtest-client": "DAPL Test Complete. PASSED",
    },
}


def demo(engine: Engine) -> int:
    """The topology, the Python demo and Debian's dtest across it, then down; exit 0 only if
    both passed and nothing was left behind."""
    topo = Topology(engine)
    ensure_image(engine)
    failed: list[str] = []
    try:
        with step(f"{engine.name} up: nodes healthy"):
            topo.up(topo.nodes())
        for title, expected in DEMOS.items():
            with step(title):
                topo.compose("up", "-d", "--no-build", *expected)
                codes = {s: topo.wait(topo.container(s)) for s in expected}
            for service, line in expected.items():
                output = topo.logs(topo.container(service)).rstrip()
                print(f"--- {service} (exit {codes[service]})\n{output}")
                if codes[service] or line not in output:
                    failed.append(service)
    finally:
        with step(f"{engine.name} down"):
            topo.down()
    left = {k: v for k, v in topo.leftovers().items() if v}
    if left:
        say(f"left behind: {left}")
        return 1
    if failed:
        say(f"failed: {', '.join(failed)}")
        return 1
    say("passed on 3 node containers: the Python demo (every byte verified) and Debian's dtest; "
        "nothing left behind")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tools.containers",
        description="the compose topology on this machine's container engine",
    )
    parser.add_argument("command", choices=["demo", "up", "down", "image"])
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        with step("engine"):
            engine = _engine_from_state(start=args.command != "down")
        say(f"engine: {engine.name}" + (" (dockerd started here)" if engine.started_pid else ""))
    except Missing as err:
        say(str(err))
        sys.exit(2)
    code = 0
    try:
        if args.command == "demo":
            code = demo(engine)
        elif args.command == "image":
            ensure_image(engine)
        elif args.command == "up":
            ensure_image(engine)
            with step(f"{engine.name} up"):
                Topology(engine).up()
            if engine.started_pid:
                _state_path().write_text(json.dumps({"dockerd": engine.started_pid}))
            say("up: `python -m tools.containers down` (make containers-down) removes it all")
            engine.started_pid = None  # keep it running for the topology
        elif args.command == "down":
            with step(f"{engine.name} down"):
                Topology(engine).down()
    except Missing as err:
        say(str(err))
        code = 2
    except subprocess.CalledProcessError as err:
        said = (err.stderr or err.stdout or "").strip().splitlines()[-8:]
        say(f"failed (exit {err.returncode}): {' '.join(map(str, err.cmd))}")
        for line in said:
            say(f"  {line}")
        code = 1
    finally:
        if engine.started_pid:
            with step("stop the dockerd started here"):
                engine.stop()
            _state_path().unlink(missing_ok=True)
    say(f"total: {time.monotonic() - started:.1f} s")
    sys.exit(code)


if __name__ == "__main__":
    main()
