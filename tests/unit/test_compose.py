"""docker-compose.yml and the Dockerfile agree with the command lines, and the topology runs.

The compose file is checked statically (every command parses with the real parsers, ports,
sockets, volumes, networks and IPC namespaces fit together) and the demo's part of the topology is
run without a container engine: each fabricd service it needs in a network namespace (its address
stands in for the service name), each consumer against its node's socket. tests/containers runs
the file itself on a container engine.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabricd.cli import build_parser as fabricd_parser
from fabricd.launch import Node
from tests.conftest import StartNode
from tests.integration.netns import two_hosts, unavailable
from tools.context import DEB_DIR, PROVIDER_DIR, WHEEL_DIR
from tools.ctl import build_parser as ctl_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
SOCKET_DIR = "/run/datfabric"


# --- reading the compose file ------------------------------------------------------------------


@dataclass
class Service:
    """One compose service, reduced to what the checks need."""

    name: str
    raw: dict[str, Any]
    argv: list[str]

    @property
    def program(self) -> str:
        return self.argv[0]

    @property
    def mounts(self) -> dict[str, str]:
        """Mount target -> source (named volume or host path)."""
        out: dict[str, str] = {}
        for vol in self.raw.get("volumes", []):
            if isinstance(vol, str):
                source, target = vol.split(":")[:2]
            else:
                source, target = vol.get("source", ""), vol["target"]
            out[target] = source
        return out

    @property
    def depends_on(self) -> set[str]:
        deps = self.raw.get("depends_on", [])
        return set(deps if isinstance(deps, list) else deps.keys())

    @property
    def exposed(self) -> set[int]:
        ports = [*self.raw.get("expose", []), *self.raw.get("ports", [])]
        return {int(str(p).split("/")[0].split(":")[-1]) for p in ports}


def _argv(command: str | list[Any]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def load_compose() -> tuple[dict[str, Any], dict[str, Service]]:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = {
        name: Service(name, raw, _argv(raw.get("command", [])))
        for name, raw in doc["services"].items()
    }
    return doc, services


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse like the program would; a usage error fails the test with its message."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"{parser.prog} rejects {argv}") from exc


def fabricd_args(svc: Service) -> argparse.Namespace:
    assert svc.program == "fabricd"
    return parse(fabricd_parser(), svc.argv[1:])


def ctl_args(svc: Service) -> argparse.Namespace:
    assert svc.program == "fabricctl"
    return parse(ctl_parser(), svc.argv[1:])


def nodes_of(services: dict[str, Service]) -> dict[str, Service]:
    return {n: s for n, s in services.items() if s.argv and s.program == "fabricd"}


def consumers_of(services: dict[str, Service]) -> dict[str, Service]:
    return {n: s for n, s in services.items() if s.argv and s.program == "fabricctl"}


def ipc_node(svc: Service) -> str:
    ipc = str(svc.raw.get("ipc", ""))
    assert ipc.startswith("service:"), f"{svc.name}: ipc must be service:<node>, not {ipc!r}"
    return ipc.removeprefix("service:")


def split_peer(peer: str) -> tuple[str, int]:
    host, _, port = peer.rpartition(":")
    assert host and port.isdigit(), f"--peer {peer!r} is not HOST:PORT"
    return host, int(port)


# --- the compose file --------------------------------------------------------------------------


def test_every_service_has_a_command() -> None:
    _, services = load_compose()
    assert services
    for svc in services.values():
        assert svc.argv, f"{svc.name} has no command"
        assert svc.program in {"fabricd", "fabricctl", "dtest"}, f"{svc.name} runs {svc.program}"


def test_nodes_parse_and_fit_their_volume() -> None:
    doc, services = load_compose()
    nodes = nodes_of(services)
    assert set(nodes) == {"node-a", "node-b", "node-c"}
    volumes = set(doc.get("volumes") or {})
    networks = set(doc.get("networks") or {})
    for name, svc in nodes.items():
        args = fabricd_args(svc)
        assert args.name == name
        _, port = args.listen
        assert port > 0
        if "expose" in svc.raw or "ports" in svc.raw:
            assert port in svc.exposed, f"{name} listens on {port}, exposes {svc.exposed}"
        assert svc.raw.get("ipc") == "shareable", f"{name}: consumers must be able to join its ipc"
        source = svc.mounts.get(SOCKET_DIR)
        assert source in volumes, f"{name}: no named volume at {SOCKET_DIR}"
        assert Path(args.socket).parent == Path(SOCKET_DIR), f"{name}: socket {args.socket}"
        joined = svc.raw.get("networks", [])
        assert joined and set(joined) <= networks, f"{name}: not on a user-defined network"
    assert len({tuple(svc.raw["networks"]) for svc in nodes.values()}) == 1, "one network"
    sources = [svc.mounts[SOCKET_DIR] for svc in nodes.values()]
    assert len(set(sources)) == len(sources), "each node needs its own socket volume"


def test_consumers_parse_and_reach_their_node() -> None:
    _, services = load_compose()
    nodes = nodes_of(services)
    consumers = consumers_of(services)
    assert set(consumers) == {"demo-server", "demo-client"}
    for name, svc in consumers.items():
        args = ctl_args(svc)
        assert args.command == "demo"
        node = ipc_node(svc)
        assert node in nodes, f"{name} shares the ipc of {node}, which is no fabricd service"
        node_args = fabricd_args(nodes[node])
        assert args.ia == node_args.socket, f"{name}: --ia is not {node}'s socket"
        ia_dir = str(Path(args.ia).parent)
        assert svc.mounts.get(ia_dir) == nodes[node].mounts[SOCKET_DIR], (
            f"{name} does not mount {node}'s socket volume at {ia_dir}"
        )
        assert node in svc.depends_on, f"{name} must depend on {node}"
        assert svc.raw.get("network_mode") == "none", f"{name}: only its daemon needs a network"
        if args.peer:
            host, port = split_peer(args.peer)
            assert host in nodes, f"{name}: --peer {host} is no fabricd service"
            assert port == fabricd_args(nodes[host]).listen[1]
            assert host in svc.depends_on


def test_client_and_server_agree() -> None:
    _, services = load_compose()
    consumers = consumers_of(services)
    server, client = consumers["demo-server"], consumers["demo-client"]
    s_args, c_args = ctl_args(server), ctl_args(client)
    assert (s_args.role, c_args.role) == ("server", "client")
    assert c_args.conn_qual == s_args.conn_qual
    assert c_args.size <= s_args.size, "the server must offer at least the client's size"
    peer_host, _ = split_peer(c_args.peer)
    assert peer_host == ipc_node(server), "the client must connect to the server's node"
    assert ipc_node(client) != peer_host, "client and server should be on different nodes"
    assert "demo-server" in client.depends_on


def c_programs_of(services: dict[str, Service]) -> dict[str, Service]:
    return {n: s for n, s in services.items() if s.argv and s.program == "dtest"}


def test_the_dtest_pair_reaches_its_nodes_and_each_other() -> None:
    """Debian's dtest in two workload containers: each a consumer of its node (IPC, socket), in
    its node's network namespace (dtest's client asks the server's node for its address), the
    client naming the server's node and starting once the server listens."""
    _, services = load_compose()
    nodes = nodes_of(services)
    dtests = c_programs_of(services)
    assert set(dtests) == {"dtest-server", "dtest-client"}
    for name, svc in dtests.items():
        node = ipc_node(svc)
        assert svc.raw.get("network_mode") == f"service:{node}", f"{name}: not in {node}'s network"
        assert svc.mounts.get(SOCKET_DIR) == nodes[node].mounts[SOCKET_DIR], name
        assert svc.argv[1:3] == ["-P", "datfabric"], f"{name}: IA of the image's dat.conf"
        assert svc.raw.get("profiles") == ["dtest"], f"{name}: started only when named"
        assert node in svc.depends_on
    server, client = dtests["dtest-server"], dtests["dtest-client"]
    assert "-s" in server.argv
    assert client.argv[client.argv.index("-h") + 1] == ipc_node(server)
    assert ipc_node(client) != ipc_node(server)
    assert client.raw["depends_on"]["dtest-server"] == {"condition": "service_healthy"}


def test_nodes_may_reach_their_consumers_memory() -> None:
    """A C program's registered memory is its own: the daemon reads and writes it by pid, so it
    sees its consumers' processes and holds the capability to reach them."""
    _, services = load_compose()
    for name, svc in nodes_of(services).items():
        assert svc.raw.get("pid") == "host", name
        assert "SYS_PTRACE" in svc.raw.get("cap_add", []), name


# --- the Dockerfile ----------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _exec_form(text: str) -> list[str]:
    if text.startswith("["):
        value = json.loads(text)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return shlex.split(text)


def dockerfile_args() -> dict[str, str]:
    """ARG defaults (before FROM: the build arguments FROM may use)."""
    out: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word == "ARG":
            name, _, default = rest.partition("=")
            out[name] = default
    return out


def test_dockerfile_base_is_an_argument_defaulting_to_stock_python() -> None:
    instr = dockerfile_instructions()
    froms = [a for w, a in instr if w == "FROM"]
    assert froms == ["${BASE}"], "one stage, on the BASE build argument"
    assert instr[0] == ("ARG", f"BASE={dockerfile_args()['BASE']}"), "ARG BASE before FROM"
    major, minor = sys.version_info[:2]
    assert dockerfile_args()["BASE"] == f"python:{major}.{minor}-slim", (
        "the stock image must run the Python the host's wheels are built for"
    )
    compose, _ = load_compose()
    build = compose["x-datfabric"]["build"]
    assert build["args"]["BASE"] == "${DATFABRIC_BASE:-" + dockerfile_args()["BASE"] + "}"


def test_dockerfile_runs_fabricd() -> None:
    instr = dockerfile_instructions()
    entry = [_exec_form(a) for w, a in instr if w == "ENTRYPOINT"]
    cmd = [_exec_form(a) for w, a in instr if w == "CMD"]
    argv = (entry[-1] if entry else []) + (cmd[-1] if cmd else [])
    assert argv and argv[0] == "fabricd", f"the image runs {argv}"
    args = parse(fabricd_parser(), argv[1:])
    assert args.listen[0] == "0.0.0.0", "peers in other containers must reach the daemon"
    assert Path(args.socket).parent == Path(SOCKET_DIR)


def test_dockerfile_installs_wheels_only() -> None:
    """No network inside the build: the project and its dependencies come in as wheels."""
    instr = dockerfile_instructions()
    runs = [a for w, a in instr if w == "RUN"]
    installs = [a.split("pip install", 1)[1] for a in runs if "pip install" in a]
    assert installs, "nothing is installed"
    for words in map(shlex.split, installs):
        assert "--no-index" in words, "pip must not reach an index during the build"
        assert "datfabric" in words
    assert not any("apt-get" in a or "curl" in a or "wget" in a for a in runs)
    copied = [
        [p for p in shlex.split(rest) if not p.startswith("--")][:-1]
        for word, rest in instr
        if word in {"COPY", "ADD"}
    ]
    made_here = [["build/debs"], ["build/wheels"], ["build/provider/libdatfabric.so"]]
    assert copied == made_here, f"only what tools.context made goes in, not {copied}"
    assert any(a.startswith("dpkg -i /tmp/debs/*.deb") for a in runs), "Debian's packages"


def test_c_programs_find_the_provider() -> None:
    """The image's dat.conf, named by DAT_OVERRIDE, is what `fabricctl dat-conf` writes for the
    node socket every container mounts, with the library where the image puts it."""
    instr = dockerfile_instructions()
    envs = dict(a.split("=", 1) for w, a in instr if w == "ENV")
    runs = [shlex.split(a) for w, a in instr if w == "RUN" and a.startswith("fabricctl dat-conf")]
    assert len(runs) == 1
    args = ctl_args(Service("image", {}, runs[0]))
    library = next(a.split()[-1] for w, a in instr if w == "COPY" and "libdatfabric.so" in a)
    assert args.library == library and args.socket == f"{SOCKET_DIR}/fabricd.sock"
    assert envs["DAT_OVERRIDE"] == args.output


def test_the_build_context_is_what_tools_context_makes() -> None:
    ignore = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    made = [WHEEL_DIR, DEB_DIR, PROVIDER_DIR]
    assert ignore == ["*", *(f"!{d.relative_to(ROOT)}/" for d in made)]


# --- the same topology, for real -----------------------------------------------------------------


def _replace(argv: list[str], option: str, value: str) -> list[str]:
    out = list(argv)
    i = out.index(option)
    out[i + 1] = value
    return out


@pytest.mark.netns
def test_compose_topology_runs(start: StartNode) -> None:
    why = unavailable()
    if why:
        pytest.skip(why)
    _, services = load_compose()
    consumers = consumers_of(services)
    used = {ipc_node(svc) for svc in consumers.values()}
    nodes = {n: s for n, s in nodes_of(services).items() if n in used}
    with two_hosts() as hosts:
        # No Docker DNS here: each fabricd service gets a namespace, its address is its name.
        address = dict(zip(sorted(nodes), hosts.addr, strict=True))
        netns = dict(zip(sorted(nodes), hosts.ns, strict=True))
        started: dict[str, Node] = {}
        for name in sorted(nodes):
            args = fabricd_args(nodes[name])
            started[name] = start(
                args.name, host=address[name], port=args.listen[1], netns=netns[name]
            )
            assert started[name].address == (address[name], args.listen[1])

        def consumer_argv(svc: Service) -> list[str]:
            argv = _replace(svc.argv[1:], "--ia", started[ipc_node(svc)].socket)
            if "--peer" in argv:
                host, port = split_peer(ctl_args(svc).peer)
                argv = _replace(argv, "--peer", f"{address[host]}:{port}")
            return [sys.executable, "-m", "tools.ctl", *argv, "--iters", "20", "--size", "65536"]

        procs: dict[str, subprocess.Popen[str]] = {}
        for name in ("demo-server", "demo-client"):  # depends_on order
            procs[name] = subprocess.Popen(
                consumer_argv(consumers[name]),
                cwd=ROOT,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        try:
            c_out, c_err = procs["demo-client"].communicate(timeout=90)
            s_out, s_err = procs["demo-server"].communicate(timeout=30)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        logs = "\n".join(f"--- {n}.log\n{node.log_text()}" for n, node in started.items())
        detail = f"client:\n{c_out}{c_err}\nserver:\n{s_out}{s_err}\n{logs}"
        assert procs["demo-server"].returncode == 0, detail
        assert procs["demo-client"].returncode == 0, detail
        assert "server: memory verified" in s_out, detail
        assert "RDMA Write" in c_out and "RDMA Read" in c_out, detail
        for node in started.values():
            assert node.stop() == 0, f"{node.name} did not exit cleanly:\n{logs}"
        leftovers = [
            str(f)
            for proc in procs.values()
            for f in Path("/dev/shm").glob(f"datfabric-{proc.pid}-*")
        ]
        assert not leftovers, f"shared memory left behind: {leftovers}"
