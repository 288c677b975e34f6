"""What a careless or hostile neighbour must not achieve (docs/security.md): each test is one
finding of the security review, run against real daemons."""

from __future__ import annotations

import os
import resource
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from client.api import Ia
from client.core import Call, Op
from client.faults import Faults
from fabricd import keyfile
from fabricd.launch import Node
from proto import calls
from proto.codec import FrameReader, encode
from proto.constants import EvdFlags, EventNumber, MemPriv, MemType
from proto.errors import (
    DatInsufficientResources,
    DatInvalidParameter,
    DatModelNotSupported,
    DatQueueEmpty,
)
from proto.frames import PROTOCOL_VERSION, FrameType, admin_socket, segment_desk
from tests.conftest import StartNode
from tests.integration.flows import connect_pair, wait_event

HIGH_FD = 1100  # past select(2)'s FD_SETSIZE (1,024)


def test_an_ia_whose_socket_is_a_high_descriptor_works(start: StartNode) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HIGH_FD + 64:
        pytest.skip(f"the descriptor limit ({hard}) is below {HIGH_FD + 64}")
    node: Node = start("fd")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH_FD + 64), hard))
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(HIGH_FD)]
    try:
        with Ia(node.socket) as ia:
            assert ia.sock.fileno() >= 1024
            evd = ia.evd_create(4, EvdFlags.SOFTWARE)
            evd.post_se(7)
            event, _ = evd.wait(5_000_000)
            assert (event.event_number, event.pointer) == (EventNumber.SOFTWARE_EVENT, 7)
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_admin_calls_are_refused_on_the_consumer_socket(start: StartNode) -> None:
    node = start("adm")
    with Ia(node.socket) as ia, pytest.raises(DatModelNotSupported, match="admin socket only"):
        ia.run(ia_admin_call(ia, "node_crash"))
    assert node.proc.poll() is None, "the node lives"
    faults = Faults({"adm": node.socket})  # the admin socket, next to the consumers'
    assert faults.status("adm")["consumers"] == 0
    assert stat.S_IMODE(os.stat(admin_socket(node.socket)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(node.socket).st_mode) == 0o600


def ia_admin_call(ia: Ia, method: str) -> Op:
    """An admin call sent on a consumer connection (past the client's own check)."""
    return (yield Call(method, []))


def start_fabricd(
    socket_path: Path, key: tuple[str, ...] = ("--no-cluster-key",)
) -> subprocess.CompletedProcess[str]:
    """Run fabricd on ``socket_path`` until it prints its ready line or exits."""
    cmd = [sys.executable, "-m", "fabricd.cli", "--listen", "127.0.0.1:0", *key]
    proc = subprocess.Popen(
        [*cmd, "--socket", str(socket_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if " ready " in line:
        proc.terminate()
    _, err = proc.communicate(timeout=15)
    return subprocess.CompletedProcess(proc.args, proc.returncode, line, err)


def test_the_socket_directory_is_created_owner_only(tmp_path: Path) -> None:
    done = start_fabricd(tmp_path / "new" / "fabricd.sock")
    assert " ready " in done.stdout, done.stderr
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


@pytest.mark.parametrize("how", ["writable by others", "a symbolic link", "another user's"])
def test_a_socket_directory_others_control_is_refused(tmp_path: Path, how: str) -> None:
    where = tmp_path / "sockets"
    if how == "writable by others":
        where.mkdir()
        where.chmod(0o777)
    elif how == "a symbolic link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        where.symlink_to(tmp_path / "elsewhere")
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        where.mkdir(mode=0o700)
        os.chown(where, 65534, 65534)  # nobody
    done = start_fabricd(where / "fabricd.sock")
    assert done.returncode != 0 and "refusing to start" in done.stderr, done.stderr
    assert not (where / "fabricd.sock").exists(), "no socket was made there"


# -- peers: the cluster key -------------------------------------------------------------------


def test_fabricd_needs_a_cluster_key_or_the_flag_that_goes_without(tmp_path: Path) -> None:
    done = start_fabricd(tmp_path / "k" / "fabricd.sock", ())
    assert done.returncode == 1 and " ready " not in done.stdout
    assert "refusing to start" in done.stderr and "--cluster-key FILE" in done.stderr
    warned = start_fabricd(tmp_path / "w" / "fabricd.sock")
    assert " ready " in warned.stdout, warned.stderr
    assert "WARNING running without a cluster key" in warned.stderr


@pytest.mark.parametrize(
    ("content", "why"),
    [(b"short\n", "holds 5 bytes"), (None, "cannot read the cluster key")],
)
def test_a_cluster_key_file_that_cannot_serve_is_refused(
    tmp_path: Path, content: bytes | None, why: str
) -> None:
    key = tmp_path / "cluster.key"
    if content is not None:
        key.write_bytes(content)
    done = start_fabricd(tmp_path / "s" / "fabricd.sock", ("--cluster-key", str(key)))
    assert done.returncode == 1 and "refusing to start" in done.stderr and why in done.stderr


def test_a_node_with_another_key_is_refused_and_logged_with_its_address(
    start: StartNode, tmp_path: Path
) -> None:
    """Two real daemons, two keys: the connect is NON_PEER_REJECTED, the listener never sees
    a request, and the refusing daemon logs who it refused."""
    other = tmp_path / "other.key"
    keyfile.generate(str(other))
    a, b = start("ka"), start("kb", cluster_key=str(other))
    with Ia(a.socket) as ia_a, Ia(b.socket) as ia_b:
        evd_a, evd_b = ia_a.evd_create(8), ia_b.evd_create(8)
        ep = ia_a.ep_create(ia_a.pz_create(), evd_a, evd_a, evd_a)
        ia_b.psp_create(4100, evd_b)
        ep.connect(b.address, 4100, 5_000_000)
        wait_event(evd_a, EventNumber.CONNECTION_EVENT_NON_PEER_REJECTED)
        with pytest.raises(DatQueueEmpty):
            evd_b.dequeue()
    refusal = [line for line in a.log_text().splitlines() if "refused" in line]
    assert refusal and f"'kb@{b.host}:{b.port}' at 127.0.0.1:" in refusal[0], a.log_text()
    assert "WARNING" in refusal[0] and "proof of the cluster key is wrong" in refusal[0]


# -- limits -------------------------------------------------------------------------------------


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def test_limits_are_enforced_by_a_real_daemon(start: StartNode) -> None:
    """--limit ia_eps=50: the 51st EP is DAT_INSUFFICIENT_RESOURCES, advertised as max_eps;
    --limit consumers=1: a second IA is refused with the same status."""
    node = start("lim", extra=["--limit", "ia_eps=50", "--limit", "consumers=1"])
    with Ia(node.socket) as ia:
        assert ia.query()["max_eps"] == 50
        pz, evd = ia.pz_create(), ia.evd_create(8)
        eps = [ia.ep_create(pz, evd, evd, evd) for _ in range(50)]
        with pytest.raises(DatInsufficientResources, match="--limit ia_eps"):
            ia.ep_create(pz, evd, evd, evd)
        eps[0].free()
        ia.ep_create(pz, evd, evd, evd)
        with pytest.raises(DatInsufficientResources, match="--limit consumers"):
            Ia(node.socket)
    Ia(node.socket).close()  # the IA that closed made room


def test_a_bad_limit_is_refused_at_start(tmp_path: Path) -> None:
    done = start_fabricd(tmp_path / "l" / "fabricd.sock", ("--no-cluster-key", "--limit", "x=1"))
    assert done.returncode == 1 and "NAME=N with NAME one of" in done.stderr


def test_memory_returns_when_an_ia_with_thousands_of_objects_closes(start: StartNode) -> None:
    """The daemon's RSS after an IA of 5,000 EPs closes gives back most of what it took, and a
    second such IA takes no more than the first: nothing is kept per object."""
    node = start("rss")
    pid, before = node.proc.pid, _rss_mib(node.proc.pid)
    peaks, after = [], []
    for _ in range(2):
        with Ia(node.socket) as ia:
            pz, evd = ia.pz_create(), ia.evd_create(8)
            for _ in range(5000):
                ia.ep_create(pz, evd, evd, evd)
            peaks.append(_rss_mib(pid))
        with Ia(node.socket) as probe:  # served after the close: the IA is gone
            probe.query()
        after.append(_rss_mib(pid))
    grown = peaks[0] - before
    assert grown > 20, f"5,000 EPs took only {grown:.1f} MiB: the test measures nothing"
    assert after[0] - before < grown / 2, f"RSS {before:.0f} -> {peaks[0]:.0f} -> {after[0]:.0f}"
    slack = grown / 10  # the heap's own noise; a kept EP each round would be 12 KiB x 5,000
    assert peaks[1] <= peaks[0] + slack and after[1] <= after[0] + slack, (peaks, after)


# -- shared memory: sealed memfds handed over at the segment desk -------------------------------


def _memfd(size: int, sealable: bool = True) -> int:
    flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealable else 0)
    fd = os.memfd_create("datfabric-test", flags)
    os.ftruncate(fd, size)
    return fd


def test_memory_handed_to_the_daemon_cannot_shrink_under_it(two_nodes: tuple[Node, Node]) -> None:
    """The finding: a consumer truncated its registered segment and an RDMA Write into it
    killed the daemon (SIGBUS). Now the daemon seals what it maps: the consumer's ftruncate
    fails, the Write lands, the daemon lives on."""
    a, b = two_nodes
    p = connect_pair(a.socket, b.socket, b.address)
    try:
        fd = _memfd(65536)
        name = p.ia_b.desk.hand_over(fd, 65536)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 1 << 20)
        queue = p.ia_b.desk.fetch(f"datfabric-{p.ia_b.core.name}-wq{p.ep_b.handle}")
        with pytest.raises(PermissionError):
            os.ftruncate(queue, 0)
        os.close(queue)
        assert name.startswith(f"datfabric-{p.ia_b.core.name}-a")
        os.close(fd)
        p.view_a[:6] = b"sealed"
        p.ep_a.post_rdma_write([p.lmr_a.triplet(0, 6)], 5, p.lmr_b.remote(0, 6))
        assert wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT).status == 0
        assert bytes(p.view_b[:6]) == b"sealed" and b.proc.poll() is None
    finally:
        p.close()


@pytest.mark.parametrize("kind", ["not sealable", "not a memfd", "wrong size", "no descriptor"])
def test_the_desk_refuses_what_cannot_be_a_segment(start: StartNode, kind: str) -> None:
    node = start("desk")
    with Ia(node.socket) as ia:
        fds = {
            "not sealable": [_memfd(4096, sealable=False)],
            "not a memfd": [os.open(node.socket.rsplit("/", 1)[0], os.O_RDONLY)],
            "wrong size": [_memfd(4096)],
            "no descriptor": [],
        }[kind]
        request = encode(
            FrameType.SEGMENT_PUT, ia.core.name, 8192 if kind == "wrong size" else 4096
        )
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(segment_desk(node.socket))
            socket.send_fds(s, [request], fds)
            reader = FrameReader()
            while (frame := reader.next_event()) is None:
                reader.feed(s.recv(4096))
        for fd in fds:
            os.close(fd)
        assert frame.type == FrameType.ERROR, frame
        assert ia.query()["adapter_name"] == "desk", "the IA goes on"


def test_another_process_cannot_fetch_an_ias_segments(start: StartNode) -> None:
    """The desk answers the process that holds the IA (SO_PEERCRED), not whoever names it."""
    node = start("desk2")
    with Ia(node.socket) as ia:
        evd = ia.evd_create(4)
        segment = f"datfabric-{ia.core.name}-eq{evd.handle}"
        os.close(ia.desk.fetch(segment))  # its own process: served
        code = (
            "import sys; from client.desk import Desk; from proto.errors import DatError\n"
            "try: Desk(sys.argv[1], sys.argv[2]).fetch(sys.argv[3])\n"
            "except DatError as err: print('REFUSED', err)"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, node.socket, ia.core.name, segment],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert done.stdout.startswith("REFUSED") and "has no open IA" in done.stdout, done


def test_the_daemon_opens_no_path_a_consumer_names(start: StartNode, tmp_path: Path) -> None:
    """A link planted in /dev/shm under a segment's name, or another IA's segment, named in
    dat_lmr_create: DAT_INVALID_PARAMETER, and nothing is read or written through it."""
    node = start("deputy")
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only")
    planted = "/dev/shm/datfabric-planted-1"
    os.symlink(secret, planted)
    try:
        with Ia(node.socket) as ia, Ia(node.socket) as other:
            pz = ia.pz_create()
            foreign = other.alloc(4096).segment
            for name in ("datfabric-planted-1", foreign):
                call = calls.LmrCreate(int(MemType.VIRTUAL), name, 0, 0x1000, None, 0, 9, pz.handle,
                                       int(MemPriv.ALL))  # fmt: skip
                with pytest.raises(DatInvalidParameter, match="no segment this IA handed"):
                    ia.run(_raw_call("lmr_create", call))
        assert secret.read_bytes() == b"root only"
    finally:
        os.unlink(planted)


def _raw_call(method: str, args: Sequence[object]) -> Op:
    return (yield Call(method, args))


@pytest.mark.parametrize("which", ["consumer", "admin"])
def test_a_local_connection_that_says_nothing_is_closed_at_the_heartbeat_timeout(
    start: StartNode, which: str
) -> None:
    node = start("quiet", extra=["--heartbeat-timeout", "0.5"])
    path = node.socket if which == "consumer" else admin_socket(node.socket)
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(path)
        reader = FrameReader()
        while chunk := s.recv(4096):
            reader.feed(chunk)
    frame = reader.next_event()
    assert frame is not None and frame.type == FrameType.ERROR
    assert "no HELLO within 0.5 s" in frame.fields[0]
    with Ia(node.socket) as ia:  # a consumer that says HELLO is not cut
        time.sleep(1.0)
        assert ia.query()["adapter_name"] == "quiet"


def test_an_ia_that_reads_none_of_its_replies_is_closed(start: StartNode) -> None:
    """--limit unread_bytes=65536: a consumer that keeps calling and never reads lets the
    replies pile up in the daemon only that far; then its IA is closed with a logged reason,
    and the daemon serves on."""
    node = start("deaf", extra=["--limit", "unread_bytes=65536"])
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(node.socket)
        s.sendall(encode(FrameType.HELLO, PROTOCOL_VERSION, PROTOCOL_VERSION, "consumer", "deaf-1"))
        call = encode(FrameType.CALL, 1, "ia_query", [])
        deadline = time.monotonic() + 30
        while "left" not in node.log_text():
            assert time.monotonic() < deadline, "the daemon kept every unread reply"
            try:
                s.sendall(call * 200)
            except OSError:  # closed under us: the log says why
                break
    assert "bytes unread (--limit unread_bytes); closing its IA" in node.log_text()
    with Ia(node.socket) as ia:
        assert ia.query()["adapter_name"] == "deaf"
