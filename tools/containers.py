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
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools.context import build_context, python_version
from tools.steps import Missing, cache_dir, run, say, step

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
IMAGE = "datfabric:local"
PROJECT = "datfabric"
SOCKET_DIR = "/run/datfabric"
DEBIAN_SUITES = {(3, 11): "bookworm", (3, 13): "trixie"}  # Debian's python3 is what the wheels need
DEBIAN_PACKAGES = ["python3", "python3-venv", "iproute2"]
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PROJECT_LABEL = "com.docker.compose.project"
WORKLOAD_LABEL = "org.datfabric.project"  # on workload containers started beside a topology


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


# --- the image -------------------------------------------------------------------------------


def stock_base() -> str:
    major, minor = python_version()
    return f"python:{major}.{minor}-slim"


def debian_suite() -> str:
    suite = DEBIAN_SUITES.get(python_version())
    if suite is None:
        known = ", ".join(f"{a}.{b}" for a, b in DEBIAN_SUITES)
        raise Missing(
            f"no registry gave {stock_base()}, and no Debian release ships Python "
            f"{'.'.join(map(str, python_version()))} to build a local base (known: {known}); "
            "run with a Python of one of those, or set DATFABRIC_BASE to an image you have"
        )
    return suite


def debian_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The host's own Debian mirror (apt's sources), else Debian's default."""
    if "DATFABRIC_DEBIAN_MIRROR" in os.environ:
        return os.environ["DATFABRIC_DEBIAN_MIRROR"]
    parts = etc_apt / "sources.list.d"
    # what apt reads: a file named otherwise (`x.list.disabled`, `x.sources.save`) is not a source
    sources = [etc_apt / "sources.list", *sorted([*parts.glob("*.list"), *parts.glob("*.sources")])]
    for path in sources:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                found = re.match(r"\s*(?:URIs:|deb(?:\s+\[[^\]]*\])?)\s+(\S+)", line)
                if found and not found.group(1).rstrip("/").endswith("-security"):
                    return found.group(1)
    return DEFAULT_MIRROR


def make_local_base(engine: Engine, name: str, suite: str) -> None:
    """A base image from Debian's archive: the cached tarball, or debootstrap then the tarball."""
    tarball = cache_dir() / "base" / f"debian-{suite}.tar"
    if not tarball.exists():
        if shutil.which("debootstrap") is None or os.geteuid() != 0:
            raise Missing(
                f"no registry gave {stock_base()}, and a local base image needs debootstrap, "
                "run as root (apt-get install debootstrap)"
            )
        rootfs = tarball.with_suffix(".rootfs")
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        try:
            with step(f"debootstrap {suite} from {debian_mirror()}"):
                include = ",".join(DEBIAN_PACKAGES)
                run(
                    ["debootstrap", "--variant=minbase", f"--include={include}", suite,
                     str(rootfs), debian_mirror()],
                    timeout=1200,
                )  # fmt: skip
            for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for item in (rootfs / junk).glob("*"):
                    if item.is_file():
                        item.unlink()
            partial = tarball.with_suffix(".partial")
            run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], timeout=600)
            partial.rename(tarball)
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)
    with step(f"import {tarball.name} as {name}"):
        engine("import", str(tarball), name)


def ensure_base(engine: Engine) -> str:
    """The base image: DATFABRIC_BASE, else the stock Python image, else a local Debian one."""
    wanted = os.environ.get("DATFABRIC_BASE")
    if wanted:
        if not engine.has_image(wanted):
            with step(f"pull {wanted}"):
                engine("pull", wanted, timeout=900)
        return wanted
    stock = stock_base()
    if engine.has_image(stock):
        return stock
    pulled = engine("pull", stock, check=False, timeout=900)
    if pulled.returncode == 0:
        return stock
    reason = (pulled.stderr.strip().splitlines() or ["no reason given"])[-1]
    suite = debian_suite()
    local = f"datfabric-base:{suite}"
    if not engine.has_image(local):
        say(f"no registry gives {stock} ({reason}): making {local} from Debian's archive")
        make_local_base(engine, local, suite)
    return local


def image_id(engine: Engine, name: str) -> str | None:
    """The id of image ``name``, None when the engine has none by that name."""
    found = engine("image", "inspect", "--format", "{{.Id}}", name, check=False, timeout=60)
    if found.returncode != 0:
        return None
    return found.stdout.strip() or None


def build_image(engine: Engine, base: str) -> None:
    """datfabric:local from the build context (tools.context) on ``base``, no network inside.

    The image it replaces (the sources changed) is removed: untagged, it would stay in the
    engine's store, one per change, until pruned. A container still using it keeps it.
    """
    with step(f"build {IMAGE} on {base}"):
        build_context()
        previous = image_id(engine, IMAGE)
        engine("build", "--network", "none", "--build-arg", f"BASE={base}", "-t", IMAGE, str(ROOT))
        if previous is not None and previous != image_id(engine, IMAGE):
            engine("rmi", previous, check=False, timeout=120)


def ensure_image(engine: Engine) -> str:
    """Base image and project image; returns the base used."""
    with step("base image"):
        base = ensure_base(engine)
    build_image(engine, base)
    return base


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
