"""docker-compose.yml on a real container engine: three node containers on a user-defined network,
one fabricd each, consumers in workload containers that share their node's IPC namespace.

The engine is whatever tools.containers finds (a running one, or dockerd started here and stopped
by the last test); the image is built without network inside the build, on the stock Python image
or a Debian base made locally. These tests skip only when no engine is installed or none starts.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fabricd.cli import build_parser as fabricd_parser
from tests.integration.flows import memfds
from tools.containers import ROOT, Topology
from tools.engine import Engine, descendants, find_engine, pid_alive
from tools.image import ensure_image
from tools.steps import Missing

pytestmark = pytest.mark.timeout(900)  # the first test may build the base image

NODES = ("node-a", "node-b", "node-c")
STREAM = f"{ROOT / 'tests' / 'containers'}:/stream:ro"
SOCKET = "/run/datfabric/fabricd.sock"
SMALL = ["--size", "65536", "--iters", "20"]
_projects = itertools.count()


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    try:
        found = find_engine(start=True)
    except Missing as err:
        pytest.skip(str(err))
    try:
        try:
            ensure_image(found)
        except Missing as err:  # no registry and no way to make a local base image
            pytest.skip(str(err))
        yield found
    finally:
        found.stop()


@pytest.fixture
def topology(engine: Engine) -> Iterator[Topology]:
    topo = Topology(engine, project=f"dft{os.getpid()}x{next(_projects)}")
    try:
        topo.up(NODES)
        yield topo
    finally:
        topo.down()


def heartbeat() -> tuple[float, float]:
    """(interval, timeout) the compose file gives every node (one setting for the fabric)."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    settings = {
        (args.heartbeat_interval, args.heartbeat_timeout)
        for name in NODES
        for args in [fabricd_parser().parse_args(services[name]["command"][1:])]
    }
    assert len(settings) == 1, f"nodes disagree on the heartbeat: {settings}"
    return settings.pop()


def wait_for(topo: Topology, container: str, pattern: str, timeout: float = 90) -> re.Match[str]:
    """Poll a container's output until ``pattern`` matches (or it exits, or time is up)."""
    deadline = time.monotonic() + timeout
    while True:
        logs = topo.logs(container)
        found = re.search(pattern, logs)
        if found:
            return found
        state = topo.engine("inspect", "-f", "{{.State.Status}}", container).stdout.strip()
        if state == "exited" or time.monotonic() > deadline:
            raise AssertionError(f"{container} ({state}) never printed {pattern!r}:\n{logs}")
        time.sleep(0.2)


def shm_of(topo: Topology, node: str) -> set[str]:
    """The segments a node's daemon maps (memfds: its consumers' arenas and queues). The node
    runs in the host's PID namespace, so its daemon's /proc entry is the host's."""
    pid = int(topo.engine("inspect", "-f", "{{.State.Pid}}", topo.container(node)).stdout)
    return memfds(pid)


def demo_pairs(topo: Topology, pairs: list[tuple[str, str]], first_qual: int) -> None:
    """The demo from the first node of each pair (client) to the second (server), concurrently."""
    runs = []
    for i, (src, dst) in enumerate(pairs):
        qual = str(first_qual + i)
        server = topo.run_workload(
            dst, f"srv-{src}-{dst}",
            ["fabricctl", "demo", "--role", "server", "--ia", SOCKET, "--conn-qual", qual, *SMALL],
        )  # fmt: skip
        runs.append((src, dst, qual, server))
    clients = [
        (src, dst, server, topo.run_workload(
            src, f"cli-{src}-{dst}",
            ["fabricctl", "demo", "--role", "client", "--ia", SOCKET, "--conn-qual", qual,
             "--peer", f"{dst}:7471", *SMALL],
        ))
        for src, dst, qual, server in runs
    ]  # fmt: skip
    for src, dst, server, client in clients:
        codes = (topo.wait(client), topo.wait(server))
        detail = f"{src} -> {dst}:\n{topo.logs(client)}\n{topo.logs(server)}"
        assert codes == (0, 0), detail
        assert "server: memory verified" in topo.logs(server), detail
        assert re.search(r"RDMA Read\s+65536\s+20", topo.logs(client)), detail


def test_the_demo_passes_between_every_pair_of_nodes(topology: Topology) -> None:
    # the compose file's own demo first (node-a -> node-b, consumers as compose services)
    topology.up(["demo-server", "demo-client"])
    for service in ("demo-client", "demo-server"):
        cid = topology.container(service)
        assert topology.wait(cid) == 0, topology.logs(cid)
    assert "server: memory verified" in topology.logs(topology.container("demo-server"))
    # then every pair at once, round the ring: each node has one client and one server
    ring = [(NODES[i], NODES[(i + 1) % len(NODES)]) for i in range(len(NODES))]
    demo_pairs(topology, ring, 46000)
    for node in NODES:
        assert shm_of(topology, node) == set(), f"{node}: segments of finished consumers"


def node_ip(topo: Topology, node: str) -> str:
    """A node container's address on the fabric network."""
    form = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    return str(topo.engine("inspect", "-f", form, topo.container(node)).stdout.strip())


def test_debians_dtest_passes_between_two_node_containers(topology: Topology) -> None:
    """A C RDMA program across containers, unmodified: Debian's dtest over libdatfabric, its
    server a consumer of node-b, its client of node-a (the compose file's dtest profile)."""
    topology.compose("up", "-d", "--no-build", "dtest-server", "dtest-client")
    outputs: dict[str, str] = {}
    for service in ("dtest-client", "dtest-server"):
        cid = topology.container(service)
        code = topology.wait(cid)
        outputs[service] = topology.logs(cid)
        assert code == 0, outputs[service]
    for out in outputs.values():
        assert "DAPL Test Complete. PASSED" in out, out
    # through the daemons: the client was given node-b's own address (not a wildcard)
    assert f"Server Name: {node_ip(topology, 'node-b')}" in outputs["dtest-client"]
    for node in ("node-a", "node-b"):
        assert shm_of(topology, node) == set(), f"{node}: segments left by dtest"


def start_stream(topo: Topology, src: str, dst: str, qual: int) -> tuple[str, str]:
    """A streaming pair: server on ``dst`` (listening first), client on ``src``, writes flowing."""
    script = ["python", "/stream/stream.py"]
    server = topo.run_workload(
        dst, f"ssrv-{src}-{dst}", [*script, "server", "--conn-qual", str(qual)], [STREAM]
    )
    wait_for(topo, server, r"listening")
    client = topo.run_workload(
        src, f"scli-{src}-{dst}",
        [*script, "client", "--peer", f"{dst}:7471", "--conn-qual", str(qual)], [STREAM],
    )  # fmt: skip
    return server, client


def writes(topo: Topology, client: str) -> int:
    counts = [int(n) for n in re.findall(r"^writes (\d+)$", topo.logs(client), re.M)]
    return max(counts, default=0)


def test_a_node_killed_mid_transfer_breaks_its_peers_only(topology: Topology) -> None:
    topo = topology
    to_c_from_a = start_stream(topo, "node-a", "node-c", 47001)
    to_c_from_b = start_stream(topo, "node-b", "node-c", 47002)
    a_to_b = start_stream(topo, "node-a", "node-b", 47003)
    for _, client in (to_c_from_a, to_c_from_b, a_to_b):
        wait_for(topo, client, r"(?m)^writes \d+$")  # mid-transfer: writes are completing

    topo.engine("kill", topo.container("node-c"))

    for server, client in (to_c_from_a, to_c_from_b):
        code, logs = topo.wait(client), topo.logs(client)
        assert code == 3, logs
        assert re.search(r"broken: write \d+ DTO_ERR_\w+ after \d+ writes", logs), logs
        assert "event CONNECTION_EVENT_BROKEN" in logs, logs
        # the consumers on the dead node lost their daemon: an error, not a hang
        assert topo.wait(server) != 0, topo.logs(server)

    # the link that did not involve node-c goes on moving data, then stops cleanly, verified
    server, client = a_to_b
    at_break = writes(topo, client)
    deadline = time.monotonic() + 90
    while writes(topo, client) <= at_break:
        assert time.monotonic() < deadline, f"no progress after the kill:\n{topo.logs(client)}"
        time.sleep(0.2)
    topo.engine("kill", "--signal", "TERM", client)
    assert topo.wait(client) == 0, topo.logs(client)
    stopped = re.search(r"stopped after (\d+) writes, verified", topo.logs(client))
    assert stopped and int(stopped.group(1)) > at_break, topo.logs(client)
    assert topo.wait(server) == 0 and "event CONNECTION_EVENT_DISCONNECTED" in topo.logs(server)
    # new connections between the survivors work too
    demo_pairs(topo, [("node-b", "node-a")], 47100)
    for node in ("node-a", "node-b"):
        assert shm_of(topo, node) == set(), f"{node}: segments of finished consumers"


def test_a_network_disconnect_is_noticed_within_the_heartbeat_timeout(topology: Topology) -> None:
    topo = topology
    interval, timeout = heartbeat()
    server, client = start_stream(topo, "node-a", "node-b", 48001)
    wait_for(topo, client, r"(?m)^writes \d+$")

    cut = time.monotonic()
    topo.engine("network", "disconnect", topo.network(), topo.container("node-b"))
    code = topo.wait(client)
    noticed = time.monotonic() - cut

    logs = topo.logs(client)
    assert code == 3 and "event CONNECTION_EVENT_BROKEN" in logs, logs
    # silence, not a reset: node-a's daemon gave up on the link by its heartbeat timeout
    assert "heartbeat timeout" in topo.logs(topo.container("node-a"))
    # a link is cut after `timeout` s of silence, checked every `interval` s; the rest is slack
    # for the containers' output and a loaded machine
    bound = 3 * (timeout + interval)
    print(f"disconnect noticed after {noticed:.2f} s (heartbeat {interval}/{timeout} s)")
    assert noticed < bound, f"noticed after {noticed:.1f} s; heartbeat {interval}/{timeout} s"
    # the other end, cut off, gives up on its side the same way
    assert topo.wait(server, timeout=bound) != 0
    assert "event CONNECTION_EVENT_BROKEN" in topo.logs(server)


def _mounts_of(ids: list[str]) -> list[str]:
    return [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if any(cid in line for cid in ids)
    ]


def test_down_leaves_no_container_volume_network_or_shm(topology: Topology) -> None:
    topo = topology
    server, client = start_stream(topo, "node-a", "node-b", 49001)
    wait_for(topo, client, r"(?m)^writes \d+$")  # down with consumers and segments in use
    ids = [topo.container(n) for n in NODES]
    local_engine = topo.engine.cli == ["docker"] and Path("/var/lib/docker").is_dir()
    assert shm_of(topo, "node-a"), "a streaming consumer's segments are mapped by node-a"
    if local_engine:  # each shareable IPC namespace has its /dev/shm mounted on the host
        assert _mounts_of(ids), "expected the nodes' /dev/shm mounts on the host"
    host_shm = set(os.listdir("/dev/shm"))
    assert topo.leftovers()["volumes"], "the project's volumes exist before down"

    left_by_compose = topo.down()

    nothing: dict[str, list[str]] = {"containers": [], "volumes": [], "networks": []}
    assert left_by_compose == nothing, "compose down itself removes the whole project"
    assert topo.leftovers() == nothing
    gone = subprocess.run(
        [*topo.engine.cli, "inspect", server, client, *ids], capture_output=True, text=True
    )
    assert gone.returncode != 0 and gone.stdout.strip() in ("", "[]")
    if local_engine:
        assert _mounts_of(ids) == [], "a /dev/shm (or other) mount of a removed container"
    assert {s for s in os.listdir("/dev/shm") if s.startswith("datfabric-")} <= host_shm


def test_the_engine_started_here_stops_and_leaves_nothing_running(engine: Engine) -> None:
    """Last: a dockerd these tests started is stopped, with what it started (containerd, shims)."""
    pid = engine.started_pid
    if pid is None:
        pytest.skip("the engine was running before the tests: not theirs to stop")
    children = descendants(pid)
    assert children, "dockerd runs its containerd"
    engine.stop()
    alive = [p for p in [pid, *children] if pid_alive(p)]
    assert alive == [], f"still running: {alive}"
    docker_mounts = [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if "/var/lib/docker/" in line or "/run/docker/" in line
    ]
    assert docker_mounts == []
