"""Conformance: the endpoint state machine of DAT_REFERENCE.md section 3, row by row.

Every test drives real ``fabricd`` daemons (one or two nodes on loopback, or two network
namespaces where the host allows it) through the blocking client API and checks what the
consumer sees: the EP state (``ep.state`` / ``ep.get_status()``), the event on the connect EVD
(number and, where the row says so, private data), and that outstanding DTOs complete with
DAT_DTO_ERR_FLUSHED where the row says they are flushed. Rows that need nothing but the
connection path run both across two nodes and on one node (the daemon's local path).

Each test is named after its row and carries the row's text in its docstring. States that only
exist while a handshake is half done (COMPLETION_PENDING) are held deterministically by SIGSTOPping
the active node's daemon: no frame it would send (the RTU) can arrive until it is resumed.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from client.api import Ep, Evd, Ia
from client.core import Event
from fabricd.launch import Node
from proto.constants import (
    TIMEOUT_INFINITE,
    CloseFlags,
    DtoCompletionStatus,
    Dtos,
    EventNumber,
    MemPriv,
    MemType,
    PspFlags,
)
from proto.constants import DatReturnSubtype as Sub
from proto.constants import EpState as S
from proto.errors import DatInvalidHandle, DatInvalidState, DatQueueEmpty
from tests.conformance.support import forge_wqe, refused
from tests.conftest import StartNode
from tests.integration.flows import stop_process
from tests.integration.netns import two_hosts, unavailable

E = EventNumber
WAIT_US = 10_000_000  # generous: a wait only ends early when the event is there
SHORT_US = 200_000  # a connect timeout, only where the row is about the timeout
QLEN = 64
SIZE = 4096
FLUSHED = DtoCompletionStatus.DTO_ERR_FLUSHED
RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE
NETNS_WHY = unavailable()

# The EP-state subtype DAT_INVALID_STATE must carry (DAT_REFERENCE.md section 2a, 47-55).
SUBTYPE = {
    S.UNCONNECTED: Sub.INVALID_STATE_EP_UNCONNECTED,
    S.ACTIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_ACTCONNPENDING,
    S.PASSIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_PASSCONNPENDING,
    S.TENTATIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_TENTCONNPENDING,
    S.CONNECTED: Sub.INVALID_STATE_EP_CONNECTED,
    S.DISCONNECTED: Sub.INVALID_STATE_EP_DISCONNECTED,
    S.RESERVED: Sub.INVALID_STATE_EP_RESERVED,
    S.COMPLETION_PENDING: Sub.INVALID_STATE_EP_COMPLPENDING,
    S.DISCONNECT_PENDING: Sub.INVALID_STATE_EP_DISCPENDING,
}

# Every state the implementation can reach. COMPLETION_PENDING comes last: staging it stops the
# active node's daemon, after which only the passive node answers.
REACHABLE = (
    S.UNCONNECTED,
    S.RESERVED,
    S.PASSIVE_CONNECTION_PENDING,
    S.ACTIVE_CONNECTION_PENDING,
    S.CONNECTED,
    S.DISCONNECT_PENDING,
    S.DISCONNECTED,
    S.COMPLETION_PENDING,
)


# -- helpers -----------------------------------------------------------------------------------


@dataclass
class End:
    """One endpoint with EVDs of its own (connect, recv, request)."""

    ep: Ep
    conn: Evd
    recv: Evd
    req: Evd


class Host:
    """One node as a consumer sees it: an open IA, a PZ and one registered buffer."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.ia = Ia(node.socket)
        self.pz = self.ia.pz_create()
        buf = self.ia.alloc(SIZE)
        self.view = buf.view
        self.lmr = self.ia.lmr_create(MemType.VIRTUAL, buf, SIZE, self.pz, MemPriv.ALL)

    @property
    def address(self) -> tuple[str, int]:
        """The node's peer address (what dat_ep_connect takes)."""
        return self.node.address

    def end(self, shared: bool = False) -> End:
        """A new EP; ``shared`` puts its recv, request and connect streams on one EVD."""
        conn = self.ia.evd_create(QLEN)
        recv = conn if shared else self.ia.evd_create(QLEN)
        req = conn if shared else self.ia.evd_create(QLEN)
        return End(self.ia.ep_create(self.pz, recv, req, conn), conn, recv, req)

    def listen(self, conn_qual: int, qlen: int = QLEN) -> Evd:
        """A PSP (CONSUMER flag) on ``conn_qual``; returns its CR EVD."""
        evd = self.ia.evd_create(qlen)
        self.ia.psp_create(conn_qual, evd)
        return evd

    def triplet(self, offset: int, length: int) -> list[int]:
        """An LMR triplet into the host's buffer."""
        return self.lmr.triplet(offset, length)

    def stop(self) -> None:
        """SIGSTOP the daemon: it reads and sends nothing until resumed."""
        stop_process(self.node.proc.pid)

    def resume(self) -> None:
        """SIGCONT the daemon."""
        if self.node.proc.poll() is None:
            os.kill(self.node.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        """Close the IA (never blocks, even when the daemon is stopped)."""
        self.ia.close()


def expect(evd: Evd, number: EventNumber) -> Event:
    """The next event on ``evd``, which must be ``number``."""
    event, _ = evd.wait(WAIT_US)
    assert event.event_number == number, event
    return event


def expect_flushed(evd: Evd, cookies: list[int], ops: list[Dtos] | None = None) -> None:
    """The next DTO completions on ``evd``: exactly ``cookies``, in order, all FLUSHED."""
    events = [expect(evd, E.DTO_COMPLETION_EVENT) for _ in cookies]
    assert [(e.cookie, e.status) for e in events] == [(c, FLUSHED) for c in cookies], events
    if ops is not None:
        assert [e.operation for e in events] == ops


def wait_queued(evd: Evd, count: int) -> None:
    """Wait until ``count`` events are queued on ``evd`` without dequeuing any."""
    deadline = time.monotonic() + WAIT_US / 1e6
    state = evd.ia.core.evd(evd.handle)
    evd.ia.core.refill(state)
    while len(state.queue) < count:
        assert time.monotonic() < deadline, f"fewer than {count} events queued"
        time.sleep(0.01)
        evd.ia.core.refill(state)


def assert_empty(evd: Evd) -> None:
    """Nothing is queued on ``evd`` (whatever the daemon has sent is read first)."""
    with refused(DatQueueEmpty, Sub.NO_SUBTYPE):
        evd.dequeue()


def assert_state(end: End, state: S) -> None:
    """The EP is in ``state``, both as ``ep.state`` and as dat_ep_get_status reports it."""
    now, status = end.ep.state, end.ep.get_status()[0]
    assert now == state, f"EP {end.ep.handle} is {now.name}, expected {state.name}"
    assert status == state, f"dat_ep_get_status says {status.name}, expected {state.name}"


def assert_invalid_state(state: S, call: Callable[..., object], *args: object) -> None:
    """``call(*args)`` fails with DAT_INVALID_STATE carrying the EP-state subtype of ``state``."""
    with refused(DatInvalidState, SUBTYPE[state]):
        call(*args)


def connect(
    a: Host,
    b: Host,
    conn_qual: int,
    *,
    shared: bool = False,
    x: End | None = None,
    y: End | None = None,
    accept_pdata: bytes = b"",
) -> tuple[End, End]:
    """Connect an EP of ``a`` to a PSP of ``b``; both sides ESTABLISHED and CONNECTED."""
    cr_evd = b.listen(conn_qual)
    x = x or a.end(shared)
    y = y or b.end(shared)
    x.ep.connect(b.address, conn_qual, WAIT_US)
    request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    request.cr_handle.accept(y.ep, accept_pdata)
    expect(x.conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    assert_state(x, S.CONNECTED)
    assert_state(y, S.CONNECTED)
    return x, y


def pend_passive(a: Host, b: Host, conn_qual: int) -> tuple[End, End, Event]:
    """``a`` connects to a PSP of ``b``; the request has arrived and is not answered yet."""
    cr_evd = b.listen(conn_qual)
    x = a.end()
    x.ep.connect(b.address, conn_qual, TIMEOUT_INFINITE)
    request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    return x, b.end(), request


def stage(state: S, a: Host, b: Host, conn_qual: int) -> End:
    """An EP in ``state`` (on ``a`` or ``b``); COMPLETION_PENDING leaves ``a`` stopped."""
    if state == S.UNCONNECTED:
        end = a.end()
    elif state in (S.RESERVED, S.PASSIVE_CONNECTION_PENDING):
        end = b.end()
        rsp_evd = b.ia.evd_create(QLEN)
        b.ia.rsp_create(conn_qual, end.ep, rsp_evd)
        if state == S.PASSIVE_CONNECTION_PENDING:
            a.end().ep.connect(b.address, conn_qual, TIMEOUT_INFINITE)
            expect(rsp_evd, E.CONNECTION_REQUEST_EVENT)
    elif state == S.ACTIVE_CONNECTION_PENDING:
        end, _, _ = pend_passive(a, b, conn_qual)
    elif state == S.COMPLETION_PENDING:
        _, end, request = pend_passive(a, b, conn_qual)
        a.stop()  # no RTU can come back
        request.cr_handle.accept(end.ep)
    else:
        end, _ = connect(a, b, conn_qual)
        if state == S.DISCONNECT_PENDING:
            # the peer has no receive posted: this send stays in flight
            end.ep.post_send([a.triplet(0, 8)], cookie=0xD0)
            end.ep.disconnect(CloseFlags.GRACEFUL)
        elif state == S.DISCONNECTED:
            end.ep.disconnect(CloseFlags.ABRUPT)
            expect(end.conn, E.CONNECTION_EVENT_DISCONNECTED)
    assert_state(end, state)
    return end


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def hosts(two_nodes: tuple[Node, Node]) -> Iterator[tuple[Host, Host]]:
    """An IA on each of two nodes: ``a`` is the active side, ``b`` the passive one."""
    a, b = Host(two_nodes[0]), Host(two_nodes[1])
    yield a, b
    a.resume()
    a.close()
    b.close()


@pytest.fixture(params=["two-nodes", "same-node"])
def any_pair(request: pytest.FixtureRequest, start: StartNode) -> Iterator[tuple[Host, Host]]:
    """Two IAs, on two nodes (peer TCP path) or on one node (the daemon's local path)."""
    if request.param == "two-nodes":
        node_a, node_b = start("node-a"), start("node-b")
    else:
        node_a = node_b = start("solo")
    a, b = Host(node_a), Host(node_b)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def host(start: StartNode) -> Iterator[Host]:
    """An IA on a single node."""
    h = Host(start("solo"))
    yield h
    h.close()


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A loopback TCP port that is bound but not listening: a connect to it is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


# -- creation and active connect ---------------------------------------------------------------


def test_ep_create_gives_unconnected(host: Host) -> None:
    """— | ep_create | UNCONNECTED |"""
    end = host.end()
    assert_state(end, S.UNCONNECTED)
    assert end.ep.get_status() == (S.UNCONNECTED, True, True)
    assert_empty(end.conn)


def test_unconnected_connect_gives_active_connection_pending(any_pair: tuple[Host, Host]) -> None:
    """UNCONNECTED | ep_connect OK | ACTIVE_CONNECTION_PENDING | dapl arms a timer when
    timeout ≠ INFINITE"""
    a, b = any_pair
    cr_evd = b.listen(100)
    x = a.end()
    x.ep.connect(b.address, 100, WAIT_US, b"hello")
    assert_state(x, S.ACTIVE_CONNECTION_PENDING)
    assert x.ep.get_status()[0] == S.ACTIVE_CONNECTION_PENDING
    request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    assert request.conn_qual == 100
    assert request.cr_handle.query().private_data == b"hello"
    # the request is not answered: the EP stays pending and nothing is posted on its EVD
    assert_state(x, S.ACTIVE_CONNECTION_PENDING)
    assert_empty(x.conn)


def test_active_cp_peer_accept_gives_established_with_accept_pdata(
    any_pair: tuple[Host, Host],
) -> None:
    """ACTIVE_CP | peer cr_accept, then RTU | CONNECTED | ESTABLISHED, carrying the accept
    pdata"""
    a, b = any_pair
    x, y, request = pend_passive(a, b, 101)
    request.cr_handle.accept(y.ep, b"welcome")
    established = expect(x.conn, E.CONNECTION_EVENT_ESTABLISHED)
    assert established.ep == x.ep.handle
    assert established.private_data == b"welcome"
    assert_state(x, S.CONNECTED)
    passive = expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    assert passive.ep == y.ep.handle
    assert len(passive.private_data) == 0, "the passive side's ESTABLISHED has pdata size 0"
    assert_state(y, S.CONNECTED)


def test_active_cp_peer_reject_gives_peer_rejected_with_pdata(any_pair: tuple[Host, Host]) -> None:
    """ACTIVE_CP | peer cr_reject | DISCONNECTED | PEER_REJECTED (2.0: with the reject pdata);
    recvs flushed"""
    a, b = any_pair
    cr_evd = b.listen(102)
    x = a.end()
    x.ep.post_recv([a.triplet(0, 64)], cookie=21)
    x.ep.post_recv([a.triplet(64, 64)], cookie=22)
    x.ep.connect(b.address, 102, WAIT_US)
    request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    request.cr_handle.reject(b"go away")
    rejected = expect(x.conn, E.CONNECTION_EVENT_PEER_REJECTED)
    assert rejected.ep == x.ep.handle
    assert rejected.private_data == b"go away"
    assert_state(x, S.DISCONNECTED)
    expect_flushed(x.recv, [21, 22], [Dtos.RECEIVE, Dtos.RECEIVE])
    assert x.ep.get_status() == (S.DISCONNECTED, True, True)


def test_active_cp_no_listener_gives_non_peer_rejected(any_pair: tuple[Host, Host]) -> None:
    """ACTIVE_CP | no listener, backlog full, remote QoS unsupported, transport error |
    DISCONNECTED | NON_PEER_REJECTED (here: no listener on the conn_qual)"""
    a, b = any_pair
    b.listen(103)  # a listener on another conn_qual does not answer for 104
    x = a.end()
    x.ep.connect(b.address, 104, WAIT_US)
    rejected = expect(x.conn, E.CONNECTION_EVENT_NON_PEER_REJECTED)
    assert rejected.ep == x.ep.handle
    assert_state(x, S.DISCONNECTED)


@pytest.mark.parametrize("lost", ["passive-node-killed", "passive-ia-closed"])
def test_active_cp_transport_error_gives_non_peer_rejected(
    hosts: tuple[Host, Host], lost: str
) -> None:
    """ACTIVE_CP | no listener, backlog full, remote QoS unsupported, transport error |
    DISCONNECTED | NON_PEER_REJECTED (here: the passive node, or the listening consumer, goes
    away with the request pending)"""
    a, b = hosts
    x, _, _ = pend_passive(a, b, 109)
    if lost == "passive-node-killed":
        b.node.proc.kill()
        b.node.proc.wait()
    else:
        b.close()
    rejected = expect(x.conn, E.CONNECTION_EVENT_NON_PEER_REJECTED)
    assert rejected.ep == x.ep.handle
    assert_state(x, S.DISCONNECTED)


def test_active_cp_backlog_full_gives_non_peer_rejected(hosts: tuple[Host, Host]) -> None:
    """ACTIVE_CP | no listener, backlog full, remote QoS unsupported, transport error |
    DISCONNECTED | NON_PEER_REJECTED (here: the PSP's backlog, its EVD qlen, is full)"""
    a, b = hosts
    cr_evd = b.listen(105, qlen=1)
    first = a.end()
    first.ep.connect(b.address, 105, WAIT_US)
    wait_queued(cr_evd, 1)  # the first request fills the backlog: it is left queued
    second = a.end()
    second.ep.connect(b.address, 105, 1_000_000)  # bounded, so a lost request cannot hang
    rejected, _ = second.conn.wait(WAIT_US)
    assert rejected.event_number == E.CONNECTION_EVENT_NON_PEER_REJECTED, rejected
    assert_state(second, S.DISCONNECTED)


def test_active_cp_host_unreachable_gives_unreachable(host: Host, dead_port: int) -> None:
    """ACTIVE_CP | host unreachable | DISCONNECTED | UNREACHABLE (here: nothing listens on the
    address)"""
    x = host.end()
    x.ep.connect(("127.0.0.1", dead_port), 106, WAIT_US)
    unreachable = expect(x.conn, E.CONNECTION_EVENT_UNREACHABLE)
    assert unreachable.ep == x.ep.handle
    assert_state(x, S.DISCONNECTED)


@pytest.mark.netns
@pytest.mark.skipif(NETNS_WHY is not None, reason=str(NETNS_WHY))
def test_active_cp_host_unreachable_across_a_cut_link_gives_unreachable(start: StartNode) -> None:
    """ACTIVE_CP | host unreachable | DISCONNECTED | UNREACHABLE (here: two hosts in network
    namespaces, and the cable between them is cut)"""
    with two_hosts() as net:
        node_a = start("ns-a", host=net.addr[0], port=7471, netns=net.ns[0])
        node_b = start("ns-b", host=net.addr[1], port=7471, netns=net.ns[1])
        a, b = Host(node_a), Host(node_b)
        try:
            b.listen(106)
            x = a.end()
            x.ep.post_recv([a.triplet(0, 64)], cookie=33)
            net.link(False)
            x.ep.connect(b.address, 106, WAIT_US)
            assert expect(x.conn, E.CONNECTION_EVENT_UNREACHABLE).ep == x.ep.handle
            assert_state(x, S.DISCONNECTED)
            expect_flushed(x.recv, [33], [Dtos.RECEIVE])
        finally:
            a.close()
            b.close()
            node_a.stop()
            node_b.stop()


def test_active_cp_timeout_gives_timed_out_and_flushes_recvs(hosts: tuple[Host, Host]) -> None:
    """ACTIVE_CP | timeout expires (or ucm runs out of REQ retries) | DISCONNECTED | TIMED_OUT;
    QP set to error, recvs flushed"""
    a, b = hosts
    cr_evd = b.listen(107)  # the listener never answers
    x = a.end()
    x.ep.post_recv([a.triplet(0, 64)], cookie=31)
    x.ep.connect(b.address, 107, SHORT_US)
    expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    timed_out = expect(x.conn, E.CONNECTION_EVENT_TIMED_OUT)
    assert timed_out.ep == x.ep.handle
    assert_state(x, S.DISCONNECTED)
    expect_flushed(x.recv, [31], [Dtos.RECEIVE])


@pytest.mark.parametrize("flags", [CloseFlags.ABRUPT, CloseFlags.GRACEFUL], ids=lambda f: f.name)
@pytest.mark.parametrize(
    "state", [S.ACTIVE_CONNECTION_PENDING, S.COMPLETION_PENDING], ids=lambda s: s.name
)
def test_pending_connect_disconnect_gives_disconnected_and_flushes_recvs(
    hosts: tuple[Host, Host], state: S, flags: CloseFlags
) -> None:
    """ACTIVE_CP / COMPLETION_PENDING | ep_disconnect (either flag) | DISCONNECTED | Connect
    aborted; dapl posts DISCONNECTED at once; recvs flushed"""
    a, b = hosts
    end = stage(state, a, b, 108)
    end.ep.post_recv([b.triplet(0, 64) if state == S.COMPLETION_PENDING else a.triplet(0, 64)], 41)
    end.ep.disconnect(flags)
    assert_state(end, S.DISCONNECTED)
    disconnected = expect(end.conn, E.CONNECTION_EVENT_DISCONNECTED)
    assert disconnected.ep == end.ep.handle
    expect_flushed(end.recv, [41], [Dtos.RECEIVE])
    assert_state(end, S.DISCONNECTED)


# -- passive side: RSP, PSP, accept and reject -------------------------------------------------


def test_unconnected_rsp_create_gives_reserved_and_rsp_free_returns_unconnected(
    any_pair: tuple[Host, Host],
) -> None:
    """UNCONNECTED | rsp_create | RESERVED | rsp_free returns it to UNCONNECTED"""
    a, b = any_pair
    y = b.end()
    rsp = b.ia.rsp_create(110, y.ep, b.ia.evd_create(QLEN))
    assert_state(y, S.RESERVED)
    assert y.ep.get_status()[0] == S.RESERVED
    rsp.free()
    assert_state(y, S.UNCONNECTED)
    # the RSP no longer listens
    x = a.end()
    x.ep.connect(b.address, 110, WAIT_US)
    expect(x.conn, E.CONNECTION_EVENT_NON_PEER_REJECTED)
    assert_state(y, S.UNCONNECTED)


def test_reserved_request_gives_passive_cp_and_the_rsp_stops_listening(
    any_pair: tuple[Host, Host],
) -> None:
    """RESERVED | request arrives | PASSIVE_CONNECTION_PENDING | CONNECTION_REQUEST on the RSP's
    EVD; the RSP stops listening"""
    a, b = any_pair
    y = b.end()
    rsp_evd = b.ia.evd_create(QLEN)
    rsp = b.ia.rsp_create(111, y.ep, rsp_evd)
    x = a.end()
    x.ep.connect(b.address, 111, WAIT_US, b"for the rsp")
    request = expect(rsp_evd, E.CONNECTION_REQUEST_EVENT)
    assert request.conn_qual == 111
    info = request.cr_handle.query()
    assert info.ep == y.ep.handle, "the RSP's CR names its reserved EP"
    assert info.private_data == b"for the rsp"
    assert_state(y, S.PASSIVE_CONNECTION_PENDING)
    # the RSP is gone: a second request on its conn_qual finds no listener
    other = a.end()
    other.ep.connect(b.address, 111, WAIT_US)
    expect(other.conn, E.CONNECTION_EVENT_NON_PEER_REJECTED)
    assert_empty(rsp_evd)
    assert_state(y, S.PASSIVE_CONNECTION_PENDING)
    assert_state(x, S.ACTIVE_CONNECTION_PENDING)
    # the handle stays the consumer's until dat_rsp_free, which succeeds and leaves the EP be
    rsp.free()
    assert_state(y, S.PASSIVE_CONNECTION_PENDING)


def test_psp_provider_flag_request_gives_new_ep_in_tentative_cp(hosts: tuple[Host, Host]) -> None:
    """— (PSP, PROVIDER flag) | request arrives | new EP in TENTATIVE_CONNECTION_PENDING |
    CONNECTION_REQUEST on the PSP EVD. The EP has NULL PZ and EVDs: the consumer must ep_modify
    before accepting"""
    a, b = hosts
    cr_evd = b.ia.evd_create(QLEN)
    b.ia.psp_create(112, cr_evd, PspFlags.PROVIDER)
    x = a.end()
    x.ep.connect(b.address, 112, WAIT_US)
    request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    assert request.cr_handle.query().ep != 0, "the provider made an EP for the request"
    tentative = Ep(b.ia, request.cr_handle.query().ep)
    assert tentative.state == S.TENTATIVE_CONNECTION_PENDING
    with refused(DatInvalidState, Sub.INVALID_STATE_EP_NOTREADY):  # NULL PZ and EVDs
        request.cr_handle.accept(None)
    conn = b.ia.evd_create(QLEN)
    tentative.modify(pz=b.pz, recv_evd=conn, request_evd=conn, connect_evd=conn)
    request.cr_handle.accept(None)
    expect(conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(x.conn, E.CONNECTION_EVENT_ESTABLISHED)


def test_tentative_cp_reject_gives_provider_control(hosts: tuple[Host, Host]) -> None:
    """TENTATIVE_CP | cr_reject | provider control | dapl frees the EP"""
    a, b = hosts
    cr_evd = b.ia.evd_create(QLEN)
    b.ia.psp_create(113, cr_evd, PspFlags.PROVIDER)
    x = a.end()
    x.ep.connect(b.address, 113, WAIT_US)
    request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    tentative = Ep(b.ia, request.cr_handle.query().ep)
    request.cr_handle.reject()
    expect(x.conn, E.CONNECTION_EVENT_PEER_REJECTED)
    with refused(DatInvalidHandle, Sub.INVALID_HANDLE_EP):
        tentative.free()  # the provider already freed it


def test_psp_consumer_flag_request_gives_cr_only_and_accept_with_own_ep(
    any_pair: tuple[Host, Host],
) -> None:
    """— (PSP, CONSUMER flag) | request arrives | CR only | CONNECTION_REQUEST; the consumer
    accepts with its own UNCONNECTED EP"""
    a, b = any_pair
    x, y, request = pend_passive(a, b, 114)
    info = request.cr_handle.query()
    assert info.ep == 0, "a CONSUMER-flag PSP makes no EP"
    assert info.conn_qual == 114
    with refused(DatInvalidHandle, Sub.INVALID_HANDLE_EP):
        request.cr_handle.accept(None)  # the CR carries no EP: one must be given
    assert_state(y, S.UNCONNECTED)
    request.cr_handle.accept(y.ep)
    expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(x.conn, E.CONNECTION_EVENT_ESTABLISHED)
    assert_state(y, S.CONNECTED)
    assert_state(x, S.CONNECTED)


@pytest.mark.parametrize(
    "via",
    [
        "psp-unconnected",
        "rsp-passive-cp",
        "provider-tentative-cp",
    ],
)
def test_cr_accept_gives_completion_pending_and_destroys_the_cr(
    hosts: tuple[Host, Host], via: str
) -> None:
    """UNCONNECTED / PASSIVE_CP / TENTATIVE_CP | cr_accept OK | COMPLETION_PENDING | CR
    destroyed. dapl first checks that the PZ and connect EVD are valid and a QP exists"""
    a, b = hosts
    if via == "psp-unconnected":
        x, y, request = pend_passive(a, b, 115)
        assert_state(y, S.UNCONNECTED)
        accept_ep: Ep | None = y.ep
    elif via == "provider-tentative-cp":
        cr_evd = b.ia.evd_create(QLEN)
        b.ia.psp_create(115, cr_evd, PspFlags.PROVIDER)
        x = a.end()
        x.ep.connect(b.address, 115, WAIT_US)
        request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
        tentative = Ep(b.ia, request.cr_handle.query().ep)
        y = End(tentative, *(b.ia.evd_create(QLEN) for _ in range(3)))
        modify = getattr(tentative, "modify", None)
        assert modify is not None, "dat_ep_modify is missing"
        modify(pz=b.pz, recv_evd=y.recv, request_evd=y.req, connect_evd=y.conn)
        assert_state(y, S.TENTATIVE_CONNECTION_PENDING)
        accept_ep = None  # the CR carries the provider's EP
    else:
        y = b.end()
        rsp_evd = b.ia.evd_create(QLEN)
        b.ia.rsp_create(115, y.ep, rsp_evd)
        x = a.end()
        x.ep.connect(b.address, 115, WAIT_US)
        request = expect(rsp_evd, E.CONNECTION_REQUEST_EVENT)
        assert_state(y, S.PASSIVE_CONNECTION_PENDING)
        accept_ep = None  # the RSP's CR carries its EP
    a.stop()  # hold the handshake before the RTU
    request.cr_handle.accept(accept_ep)
    assert_state(y, S.COMPLETION_PENDING)
    assert y.ep.get_status()[0] == S.COMPLETION_PENDING
    with refused(DatInvalidHandle, Sub.INVALID_HANDLE_CR):
        request.cr_handle.query()  # the CR is destroyed
    with refused(DatInvalidHandle, Sub.INVALID_HANDLE_CR):
        request.cr_handle.accept(y.ep)
    a.resume()
    expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(x.conn, E.CONNECTION_EVENT_ESTABLISHED)


def test_cr_accept_with_an_ep_in_any_other_state_is_invalid_state(
    hosts: tuple[Host, Host],
) -> None:
    """UNCONNECTED / PASSIVE_CP / TENTATIVE_CP | cr_accept OK | COMPLETION_PENDING (an EP in any
    other state: DAT_INVALID_STATE, without any effect on the EP or the pending CR)"""
    a, b = hosts
    _, fresh, request = pend_passive(a, b, 230)
    others = [s for s in REACHABLE if s not in (S.UNCONNECTED, S.PASSIVE_CONNECTION_PENDING)]
    for cq, state in enumerate(others, 231):
        # every EP is b's: b plays the active side for the states only an active EP reaches
        active_state = state not in (S.RESERVED, S.COMPLETION_PENDING)
        end = stage(state, b, a, cq) if active_state else stage(state, a, b, cq)
        with refused(DatInvalidState, SUBTYPE[state]):
            request.cr_handle.accept(end.ep)
        assert_state(end, state)
        assert request.cr_handle.query().conn_qual == 230, "the CR is still pending"
    request.cr_handle.accept(fresh.ep)  # the CR is still good for an UNCONNECTED EP
    assert_state(fresh, S.COMPLETION_PENDING)  # no RTU: the active daemon is stopped


def test_cr_accept_with_an_ep_pending_for_another_request_is_invalid_state(
    any_pair: tuple[Host, Host],
) -> None:
    """PASSIVE_CP | cr_accept OK | COMPLETION_PENDING — only for the EP's own request: a PSP's
    request accepted with an EP that is PASSIVE_CP for its RSP's request fails with
    DAT_INVALID_STATE, without any effect on the EP or either request"""
    a, b = any_pair
    y = b.end()
    rsp_evd = b.ia.evd_create(QLEN)
    b.ia.rsp_create(240, y.ep, rsp_evd)
    for_rsp = a.end()
    for_rsp.ep.connect(b.address, 240, WAIT_US)
    rsp_request = expect(rsp_evd, E.CONNECTION_REQUEST_EVENT)
    assert_state(y, S.PASSIVE_CONNECTION_PENDING)
    _, fresh, psp_request = pend_passive(a, b, 241)
    with refused(DatInvalidState, Sub.INVALID_STATE_EP_PASSCONNPENDING):
        psp_request.cr_handle.accept(y.ep)
    assert_state(y, S.PASSIVE_CONNECTION_PENDING)
    # both requests are untouched: each can still be accepted with its own EP
    psp_request.cr_handle.accept(fresh.ep)
    rsp_request.cr_handle.accept(None)
    expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(for_rsp.conn, E.CONNECTION_EVENT_ESTABLISHED)


def test_cr_accept_of_an_rsp_request_naming_an_ep_is_invalid_handle(
    any_pair: tuple[Host, Host],
) -> None:
    """PASSIVE_CP | cr_accept OK | COMPLETION_PENDING — the RSP's request carries its EP, so
    cr_accept takes NULL; an EP given anyway is DAT_INVALID_HANDLE (section 1e) and the EP stays
    PASSIVE_CP"""
    a, b = any_pair
    y = b.end()
    rsp_evd = b.ia.evd_create(QLEN)
    b.ia.rsp_create(242, y.ep, rsp_evd)
    x = a.end()
    x.ep.connect(b.address, 242, WAIT_US)
    request = expect(rsp_evd, E.CONNECTION_REQUEST_EVENT)
    with refused(DatInvalidHandle, Sub.INVALID_HANDLE_EP):
        request.cr_handle.accept(y.ep)
    assert_state(y, S.PASSIVE_CONNECTION_PENDING)
    request.cr_handle.accept(None)
    expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(x.conn, E.CONNECTION_EVENT_ESTABLISHED)


def test_completion_pending_rtu_gives_established_without_pdata(hosts: tuple[Host, Host]) -> None:
    """COMPLETION_PENDING | RTU arrives | CONNECTED | ESTABLISHED (passive side: pdata size 0)"""
    a, b = hosts
    y = stage(S.COMPLETION_PENDING, a, b, 116)
    assert_empty(y.conn)  # no RTU while the active daemon is stopped
    a.resume()
    established = expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    assert established.ep == y.ep.handle
    assert len(established.private_data) == 0
    assert_state(y, S.CONNECTED)


@pytest.mark.parametrize("gone", ["active-node-killed", "active-ep-freed", "active-timed-out"])
def test_completion_pending_active_side_gone_gives_accept_completion_error(
    hosts: tuple[Host, Host], gone: str
) -> None:
    """COMPLETION_PENDING | active side gone, timeout, or transport error | DISCONNECTED |
    ACCEPT_COMPLETION_ERROR; recvs flushed (here: the active node dies after the accept, or the
    active EP is freed or times out before it; either way no RTU can come)"""
    a, b = hosts
    if gone == "active-timed-out":
        cr_evd = b.listen(117)
        x, y = a.end(), b.end()
        x.ep.connect(b.address, 117, SHORT_US)
        request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
        expect(x.conn, E.CONNECTION_EVENT_TIMED_OUT)
    else:
        x, y, request = pend_passive(a, b, 117)
    y.ep.post_recv([b.triplet(0, 64)], cookie=51)
    y.ep.post_recv([b.triplet(64, 64)], cookie=52)
    if gone == "active-node-killed":
        a.stop()
        request.cr_handle.accept(y.ep)
        assert_state(y, S.COMPLETION_PENDING)
        a.node.proc.kill()  # the active side is gone before it could send the RTU
        a.node.proc.wait()
    else:
        if gone == "active-ep-freed":
            x.ep.free()  # implicit abrupt disconnect of the pending connect
        # the accept itself succeeds; the failure arrives as an event
        request.cr_handle.accept(y.ep)
    failed = expect(y.conn, E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR)
    assert failed.ep == y.ep.handle
    assert_state(y, S.DISCONNECTED)
    expect_flushed(y.recv, [51, 52], [Dtos.RECEIVE, Dtos.RECEIVE])


def test_passive_cp_reject_returns_ep_to_unconnected(any_pair: tuple[Host, Host]) -> None:
    """PASSIVE_CP | cr_reject | UNCONNECTED | EP goes back to the consumer"""
    a, b = any_pair
    y = b.end()
    rsp_evd = b.ia.evd_create(QLEN)
    b.ia.rsp_create(118, y.ep, rsp_evd)
    x = a.end()
    x.ep.connect(b.address, 118, WAIT_US)
    request = expect(rsp_evd, E.CONNECTION_REQUEST_EVENT)
    assert_state(y, S.PASSIVE_CONNECTION_PENDING)
    request.cr_handle.reject(b"not now")
    assert_state(y, S.UNCONNECTED)
    assert expect(x.conn, E.CONNECTION_EVENT_PEER_REJECTED).private_data == b"not now"
    # the EP is the consumer's again: it can be reserved once more and accept a request
    b.ia.rsp_create(119, y.ep, rsp_evd)
    assert_state(y, S.RESERVED)
    again = a.end()
    again.ep.connect(b.address, 119, WAIT_US)
    expect(rsp_evd, E.CONNECTION_REQUEST_EVENT).cr_handle.accept(None)
    expect(again.conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    assert_state(y, S.CONNECTED)


# -- disconnect ---------------------------------------------------------------------------------


def test_connected_graceful_disconnect_gives_disconnect_pending_then_disconnected(
    any_pair: tuple[Host, Host],
) -> None:
    """CONNECTED | disconnect GRACEFUL | DISCONNECT_PENDING → DISCONNECTED | In-flight request
    DTOs are allowed to finish; no new send, RDMA or bind may be posted meanwhile. Ends with
    DISCONNECTED"""
    a, b = any_pair
    x, y = connect(a, b, 120, shared=True)  # one EVD: completions and DISCONNECTED in order
    a.view[:5] = b"bye!!"
    x.ep.post_send([a.triplet(0, 5)], cookie=61)  # in flight: the peer has no receive yet
    x.ep.disconnect(CloseFlags.GRACEFUL)
    assert_state(x, S.DISCONNECT_PENDING)
    assert x.ep.get_status() == (S.DISCONNECT_PENDING, True, False)
    assert_invalid_state(S.DISCONNECT_PENDING, x.ep.post_send, [a.triplet(0, 5)], 62)
    assert_invalid_state(
        S.DISCONNECT_PENDING, x.ep.post_rdma_write, [a.triplet(0, 5)], 63, b.lmr.remote(0, 5)
    )
    assert_invalid_state(
        S.DISCONNECT_PENDING, x.ep.post_rdma_read, [a.triplet(0, 5)], 64, b.lmr.remote(0, 5)
    )
    window = a.ia.rmr_create(a.pz)
    assert_invalid_state(S.DISCONNECT_PENDING, window.bind, a.lmr, a.triplet(0, 64), RW, x.ep)
    assert_empty(x.conn)  # the send cannot finish before the peer posts a receive
    assert_state(x, S.DISCONNECT_PENDING)
    y.ep.post_recv([b.triplet(100, 64)], cookie=65)
    received = expect(y.conn, E.DTO_COMPLETION_EVENT)
    assert (received.cookie, received.status, received.transfered_length) == (65, 0, 5)
    assert bytes(b.view[100:105]) == b"bye!!"
    sent = expect(x.conn, E.DTO_COMPLETION_EVENT)
    assert (sent.cookie, sent.status, sent.operation) == (61, 0, Dtos.SEND)
    disconnected = expect(x.conn, E.CONNECTION_EVENT_DISCONNECTED)
    assert disconnected.ep == x.ep.handle
    assert x.ep.get_status() == (S.DISCONNECTED, True, True)
    expect(y.conn, E.CONNECTION_EVENT_DISCONNECTED)
    assert_state(y, S.DISCONNECTED)
    # with nothing in flight, a graceful disconnect ends in DISCONNECTED at once
    x, y = connect(a, b, 126)
    x.ep.disconnect(CloseFlags.GRACEFUL)
    assert expect(x.conn, E.CONNECTION_EVENT_DISCONNECTED).ep == x.ep.handle
    assert_state(x, S.DISCONNECTED)
    expect(y.conn, E.CONNECTION_EVENT_DISCONNECTED)


def test_connected_abrupt_disconnect_flushes_outstanding_dtos_in_order(
    any_pair: tuple[Host, Host],
) -> None:
    """CONNECTED | disconnect ABRUPT | DISCONNECTED | Outstanding DTOs are flushed, in order.
    DISCONNECTED"""
    a, b = any_pair
    x, _ = connect(a, b, 121)
    # the peer posts no receive: the first send stalls, and everything behind it waits
    x.ep.post_send([a.triplet(0, 8)], cookie=71)
    x.ep.post_send([a.triplet(8, 8)], cookie=72)
    x.ep.post_rdma_write([a.triplet(16, 8)], 73, b.lmr.remote(0, 8))
    x.ep.post_rdma_read([a.triplet(24, 8)], 74, b.lmr.remote(8, 8))
    x.ep.post_send([a.triplet(32, 8)], cookie=75)
    x.ep.post_recv([a.triplet(100, 64)], cookie=76)
    x.ep.post_recv([a.triplet(200, 64)], cookie=77)
    assert x.ep.get_status() == (S.CONNECTED, False, False)
    x.ep.disconnect(CloseFlags.ABRUPT)
    assert_state(x, S.DISCONNECTED)
    expect(x.conn, E.CONNECTION_EVENT_DISCONNECTED)
    expect_flushed(
        x.req,
        [71, 72, 73, 74, 75],
        [Dtos.SEND, Dtos.SEND, Dtos.RDMA_WRITE, Dtos.RDMA_READ, Dtos.SEND],
    )
    expect_flushed(x.recv, [76, 77], [Dtos.RECEIVE, Dtos.RECEIVE])
    assert x.ep.get_status() == (S.DISCONNECTED, True, True)


def test_disconnect_pending_abrupt_gives_disconnected(any_pair: tuple[Host, Host]) -> None:
    """DISCONNECT_PENDING | ABRUPT | DISCONNECTED | A GRACEFUL call here: the spec says no
    effect; dapl returns IP|ARG2"""
    a, b = any_pair
    x, y = connect(a, b, 122)
    x.ep.post_send([a.triplet(0, 8)], cookie=0xD0)  # in flight: the peer has no receive
    x.ep.disconnect(CloseFlags.GRACEFUL)
    assert_state(x, S.DISCONNECT_PENDING)
    x.ep.disconnect(CloseFlags.GRACEFUL)  # no effect (the spec's reading)
    assert_state(x, S.DISCONNECT_PENDING)
    assert_empty(x.conn)
    x.ep.disconnect(CloseFlags.ABRUPT)
    assert_state(x, S.DISCONNECTED)
    expect(x.conn, E.CONNECTION_EVENT_DISCONNECTED)
    expect_flushed(x.req, [0xD0], [Dtos.SEND])
    expect(y.conn, E.CONNECTION_EVENT_DISCONNECTED)
    assert_state(y, S.DISCONNECTED)
    assert_empty(y.recv)  # the send never found a receive: nothing completed on the peer


def test_connected_peer_disconnect_gives_disconnected_and_flushes_recvs(
    any_pair: tuple[Host, Host],
) -> None:
    """CONNECTED | peer disconnects | DISCONNECTED | DISCONNECTED; recvs flushed (one EVD
    for everything: the message sent before the disconnect completes before DISCONNECTED)"""
    a, b = any_pair
    x, y = connect(a, b, 123, shared=True)
    for cookie in (81, 82, 83):
        y.ep.post_recv([b.triplet(64 * (cookie - 81), 64)], cookie=cookie)
    # posts need no reply: a call on the same IA makes sure b's daemon has the receives before
    # a's message can arrive (else it waits as "receiver not ready" and the disconnect wins)
    b.ia.query()
    a.view[:6] = b"last!!"
    x.ep.post_send([a.triplet(0, 6)], cookie=84)
    x.ep.disconnect(CloseFlags.ABRUPT)
    received = expect(y.conn, E.DTO_COMPLETION_EVENT)
    assert (received.cookie, received.status, received.transfered_length) == (81, 0, 6)
    assert bytes(b.view[:6]) == b"last!!"
    rest = [y.conn.wait(WAIT_US)[0] for _ in range(3)]
    numbers = [e.event_number for e in rest]
    assert numbers.count(E.CONNECTION_EVENT_DISCONNECTED) == 1, rest
    disconnected = rest[numbers.index(E.CONNECTION_EVENT_DISCONNECTED)]
    assert disconnected.ep == y.ep.handle
    flushed = [e for e in rest if e.event_number == E.DTO_COMPLETION_EVENT]
    assert [(e.cookie, e.status, e.operation) for e in flushed] == [
        (82, FLUSHED, Dtos.RECEIVE),
        (83, FLUSHED, Dtos.RECEIVE),
    ]
    assert y.ep.get_status() == (S.DISCONNECTED, True, True)


def test_connected_dto_error_gives_broken_and_flushes_later_dtos(
    any_pair: tuple[Host, Host],
) -> None:
    """CONNECTED (also ACTIVE_CP, PASSIVE_CP, COMPLETION_PENDING) | a DTO or bind completes with
    an error other than FLUSHED (remote access, RNR or transport retry exceeded, length …) |
    DISCONNECTED | dapl delivers the error completion, disconnects abruptly and posts BROKEN.
    Later WRs complete FLUSHED (here: an RDMA Write with a bad rmr_context)"""
    a, b = any_pair
    x, _ = connect(a, b, 124)
    x.ep.post_recv([a.triplet(100, 64)], cookie=91)
    good = b.lmr.remote(0, 8)
    bad = [good[0], good[1], good[2] ^ 0x5A5A5A5A]
    x.ep.post_rdma_write([a.triplet(0, 8)], 92, bad)
    x.ep.post_rdma_write([a.triplet(0, 8)], 93, good)
    broken = expect(x.conn, E.CONNECTION_EVENT_BROKEN)
    assert broken.ep == x.ep.handle
    assert_state(x, S.DISCONNECTED)
    failed = expect(x.req, E.DTO_COMPLETION_EVENT)
    assert (failed.cookie, failed.status) == (92, DtoCompletionStatus.DTO_ERR_REMOTE_ACCESS)
    expect_flushed(x.req, [93], [Dtos.RDMA_WRITE])
    expect_flushed(x.recv, [91], [Dtos.RECEIVE])


@pytest.mark.parametrize(
    "state",
    [
        S.CONNECTED,
        S.ACTIVE_CONNECTION_PENDING,
        S.PASSIVE_CONNECTION_PENDING,
        S.COMPLETION_PENDING,
    ],
    ids=lambda s: s.name,
)
def test_a_receive_that_fails_breaks_the_connection(hosts: tuple[Host, Host], state: S) -> None:
    """CONNECTED (also ACTIVE_CP, PASSIVE_CP, COMPLETION_PENDING) | a DTO or bind completes with
    an error other than FLUSHED | DISCONNECTED | error completion, BROKEN; later WRs FLUSHED.
    In the three pending states a receive is the only DTO that can be posted. The library
    refuses a bad receive buffer synchronously, so this receive goes straight to the daemon
    (as a consumer past the library's check would post it), naming an LMR that was freed:
    the daemon completes it with DAT_DTO_ERR_LOCAL_PROTECTION, after which the EP must be
    DISCONNECTED with BROKEN and the good receive posted before it flushed."""
    a, b = hosts
    end = stage(state, a, b, 230)
    h = b if state in (S.PASSIVE_CONNECTION_PENDING, S.COMPLETION_PENDING) else a
    end.ep.post_recv([h.triplet(0, 64)], cookie=231)
    gone = h.ia.lmr_create(MemType.VIRTUAL, h.ia.alloc(64), 64, h.pz, MemPriv.ALL)
    iov = [gone.triplet(0, 64)]
    gone.free()
    forge_wqe(h.ia, end.ep.handle, Dtos.RECEIVE, 232, iov)
    failed = expect(end.recv, E.DTO_COMPLETION_EVENT)
    assert (failed.cookie, failed.status) == (232, DtoCompletionStatus.DTO_ERR_LOCAL_PROTECTION)
    assert expect(end.conn, E.CONNECTION_EVENT_BROKEN).ep == end.ep.handle
    assert_state(end, S.DISCONNECTED)
    expect_flushed(end.recv, [231], [Dtos.RECEIVE])


def test_connected_transport_lost_gives_broken(hosts: tuple[Host, Host]) -> None:
    """CONNECTED | fatal QP or async error | DISCONNECTED | BROKEN, and/or ASYNC_ERROR_EP_BROKEN
    on the async EVD (here: the peer's node dies)"""
    a, b = hosts
    x, _ = connect(a, b, 125)
    x.ep.post_recv([a.triplet(0, 64)], cookie=95)
    b.node.proc.kill()
    b.node.proc.wait()
    broken = expect(x.conn, E.CONNECTION_EVENT_BROKEN)
    assert broken.ep == x.ep.handle
    assert_state(x, S.DISCONNECTED)
    expect_flushed(x.recv, [95], [Dtos.RECEIVE])


def test_disconnect_where_there_is_no_connection_is_invalid_state(
    hosts: tuple[Host, Host],
) -> None:
    """dat_ep_disconnect (section 1d) | IS in UNCONNECTED, RESERVED, PASSIVE_CP, TENTATIVE_CP"""
    a, b = hosts
    for cq, state in enumerate((S.UNCONNECTED, S.RESERVED, S.PASSIVE_CONNECTION_PENDING), 130):
        end = stage(state, a, b, cq)
        for flags in (CloseFlags.ABRUPT, CloseFlags.GRACEFUL):
            assert_invalid_state(state, end.ep.disconnect, flags)
        assert_state(end, state)


def test_connect_outside_unconnected_is_invalid_state(hosts: tuple[Host, Host]) -> None:
    """dat_ep_connect (section 1d) | IS (not UNCONNECTED) — with the EP-state subtype"""
    a, b = hosts
    b.listen(139)
    for cq, state in enumerate(REACHABLE[1:], 131):
        end = stage(state, a, b, cq)
        assert_invalid_state(state, end.ep.connect, b.address, 139, WAIT_US)
        assert_state(end, state)


def test_rsp_create_outside_unconnected_is_invalid_state(hosts: tuple[Host, Host]) -> None:
    """dat_rsp_create (section 1e) | the given EP must be UNCONNECTED, else IS (with the
    EP-state subtype)"""
    a, b = hosts
    for cq, state in enumerate(REACHABLE[1:], 210):
        end = stage(state, a, b, cq)
        h = b if state in (S.RESERVED, S.PASSIVE_CONNECTION_PENDING, S.COMPLETION_PENDING) else a
        evd = h.ia.evd_create(QLEN)
        assert_invalid_state(state, h.ia.rsp_create, 220, end.ep, evd)
        assert_state(end, state)


@pytest.mark.parametrize("flags", [CloseFlags.ABRUPT, CloseFlags.GRACEFUL], ids=lambda f: f.name)
def test_disconnected_disconnect_is_a_no_op(hosts: tuple[Host, Host], flags: CloseFlags) -> None:
    """DISCONNECTED | DISCONNECT_GRACEFUL / DISCONNECT_ABRUPT | DISCONNECTED | Already
    DISCONNECTED → no-op SUCCESS (no event)"""
    a, b = hosts
    x = stage(S.DISCONNECTED, a, b, 135)
    x.ep.disconnect(flags)
    assert_state(x, S.DISCONNECTED)
    assert_empty(x.conn)


# -- reset, free, posts -------------------------------------------------------------------------


def test_reset_from_disconnected_or_unconnected_gives_unconnected_and_ep_connects_again(
    any_pair: tuple[Host, Host],
) -> None:
    """DISCONNECTED / UNCONNECTED | ep_reset | UNCONNECTED | Required before connecting again
    (dapltest resets and reposts after PEER_REJECTED)"""
    a, b = any_pair
    x = a.end()
    x.ep.reset()  # from UNCONNECTED
    assert_state(x, S.UNCONNECTED)
    # rejected, reset, connected, disconnected, reset, connected again
    cr_evd = b.listen(140)
    x.ep.connect(b.address, 140, WAIT_US)
    expect(cr_evd, E.CONNECTION_REQUEST_EVENT).cr_handle.reject()
    expect(x.conn, E.CONNECTION_EVENT_PEER_REJECTED)
    assert_state(x, S.DISCONNECTED)
    assert_invalid_state(S.DISCONNECTED, x.ep.connect, b.address, 140, WAIT_US)
    x.ep.reset()
    assert x.ep.get_status() == (S.UNCONNECTED, True, True)
    for round_, cq in enumerate((141, 142)):
        _, y = connect(a, b, cq, x=x)
        data = bytes([round_ + 1]) * 16
        a.view[:16] = data
        y.ep.post_recv([b.triplet(0, 64)], cookie=100 + round_)
        x.ep.post_send([a.triplet(0, 16)], cookie=110 + round_)
        got = expect(y.recv, E.DTO_COMPLETION_EVENT)
        assert (got.cookie, got.status, got.transfered_length) == (100 + round_, 0, 16)
        assert bytes(b.view[:16]) == data
        sent = expect(x.req, E.DTO_COMPLETION_EVENT)
        assert (sent.cookie, sent.status) == (110 + round_, 0)
        x.ep.disconnect(CloseFlags.ABRUPT)
        expect(x.conn, E.CONNECTION_EVENT_DISCONNECTED)
        x.ep.reset()
        assert_state(x, S.UNCONNECTED)


def test_reset_in_any_other_state_is_invalid_state(hosts: tuple[Host, Host]) -> None:
    """DISCONNECTED / UNCONNECTED | ep_reset | UNCONNECTED | … From any other state → IS (with
    the EP-state subtype)"""
    a, b = hosts
    others = [s for s in REACHABLE if s not in (S.UNCONNECTED, S.DISCONNECTED)]
    for cq, state in enumerate(others, 150):
        end = stage(state, a, b, cq)
        assert_invalid_state(state, end.ep.reset)
        assert_state(end, state)


def test_free_is_valid_in_every_state_but_reserved_passive_cp_tentative_cp(
    hosts: tuple[Host, Host],
) -> None:
    """any except RESERVED, PASSIVE_CP, TENTATIVE_CP | ep_free | — | Implicit abrupt disconnect
    (RESERVED and PASSIVE_CP: DAT_INVALID_STATE)"""
    a, b = hosts
    for cq, state in enumerate(REACHABLE, 160):
        peer = None
        if state == S.CONNECTED:
            end, peer = connect(a, b, cq)
        else:
            end = stage(state, a, b, cq)
        if state in (S.RESERVED, S.PASSIVE_CONNECTION_PENDING):
            assert_invalid_state(state, end.ep.free)
            assert_state(end, state)
            continue
        end.ep.free()
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_EP):
            end.ep.get_status()
        if peer is not None:  # the implicit abrupt disconnect reaches the peer
            assert expect(peer.conn, E.CONNECTION_EVENT_DISCONNECTED).ep == peer.ep.handle
            assert_state(peer, S.DISCONNECTED)


def test_free_in_tentative_cp_is_invalid_state(hosts: tuple[Host, Host]) -> None:
    """any except RESERVED, PASSIVE_CP, TENTATIVE_CP | ep_free | — | (TENTATIVE_CP:
    DAT_INVALID_STATE)"""
    a, b = hosts
    cr_evd = b.ia.evd_create(QLEN)
    b.ia.psp_create(169, cr_evd, PspFlags.PROVIDER)
    a.end().ep.connect(b.address, 169, WAIT_US)
    request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    tentative = Ep(b.ia, request.cr_handle.query().ep)
    assert_invalid_state(S.TENTATIVE_CONNECTION_PENDING, tentative.free)


def test_disconnected_posts_are_accepted_then_flushed(any_pair: tuple[Host, Host]) -> None:
    """DISCONNECTED | post send, RDMA, recv or bind | same | Accepted, then flushed
    immediately"""
    a, b = any_pair
    x = stage(S.DISCONNECTED, a, b, 170)
    remote = b.lmr.remote(0, 8)
    x.ep.post_send([a.triplet(0, 8)], cookie=171)
    x.ep.post_rdma_write([a.triplet(8, 8)], 172, remote)
    x.ep.post_rdma_read([a.triplet(16, 8)], 173, remote)
    x.ep.post_recv([a.triplet(100, 64)], cookie=174)
    expect_flushed(x.req, [171, 172, 173], [Dtos.SEND, Dtos.RDMA_WRITE, Dtos.RDMA_READ])
    expect_flushed(x.recv, [174], [Dtos.RECEIVE])
    assert x.ep.get_status() == (S.DISCONNECTED, True, True)


def test_request_posts_in_unconnected_or_pending_states_are_invalid_state(
    hosts: tuple[Host, Host],
) -> None:
    """DISCONNECTED | post … | same | … Request-side posts in UNCONNECTED or a *_PENDING state
    return IS"""
    a, b = hosts
    refused = [s for s in REACHABLE if s not in (S.CONNECTED, S.DISCONNECTED)]
    for cq, state in enumerate(refused, 180):
        end = stage(state, a, b, cq)
        h = b if state in (S.RESERVED, S.PASSIVE_CONNECTION_PENDING, S.COMPLETION_PENDING) else a
        local, remote = h.triplet(0, 8), h.lmr.remote(8, 8)
        assert_invalid_state(state, end.ep.post_send, [local], 1)
        assert_invalid_state(state, end.ep.post_rdma_write, [local], 2, remote)
        assert_invalid_state(state, end.ep.post_rdma_read, [local], 3, remote)
        window = h.ia.rmr_create(h.pz)
        assert_invalid_state(state, window.bind, h.lmr, h.triplet(0, 64), RW, end.ep, 4)
        assert_state(end, state)
        assert_empty(end.req)


def test_request_posts_and_bind_in_tentative_cp_are_invalid_state(
    hosts: tuple[Host, Host],
) -> None:
    """DISCONNECTED | post … | same | … Request-side posts in UNCONNECTED or a *_PENDING state
    return IS: TENTATIVE_CONNECTION_PENDING (the EP a PSP with the PROVIDER flag made) refuses
    send, RDMA Write, RDMA Read and bind, both as the provider made it (NULL PZ and EVDs) and
    after ep_modify gave it a PZ and EVDs, so that every other argument is valid. Nothing is
    queued, the EP stays TENTATIVE_CONNECTION_PENDING, and once accepted it posts normally."""
    a, b = hosts
    cr_evd = b.ia.evd_create(QLEN)
    b.ia.psp_create(187, cr_evd, PspFlags.PROVIDER)
    x = a.end()
    x.ep.connect(b.address, 187, WAIT_US)
    request = expect(cr_evd, E.CONNECTION_REQUEST_EVENT)
    tentative = Ep(b.ia, request.cr_handle.query().ep)
    conn = b.ia.evd_create(QLEN)
    end = End(tentative, conn, conn, conn)
    window = b.ia.rmr_create(b.pz)
    local, remote = b.triplet(0, 8), a.lmr.remote(8, 8)
    for modified in (False, True):
        if modified:
            tentative.modify(pz=b.pz, recv_evd=conn, request_evd=conn, connect_evd=conn)
        state = S.TENTATIVE_CONNECTION_PENDING
        assert_invalid_state(state, tentative.post_send, [local], 1)
        assert_invalid_state(state, tentative.post_rdma_write, [local], 2, remote)
        assert_invalid_state(state, tentative.post_rdma_read, [local], 3, remote)
        assert_invalid_state(state, window.bind, b.lmr, b.triplet(0, 64), RW, tentative, 4)
        assert_state(end, state)
    assert_empty(conn)
    assert_empty(cr_evd)
    request.cr_handle.accept(None)
    expect(conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(x.conn, E.CONNECTION_EVENT_ESTABLISHED)
    a.view[:8] = b"accepted"
    tentative.post_rdma_read([b.triplet(16, 8)], 5, a.lmr.remote(0, 8))
    done = expect(conn, E.DTO_COMPLETION_EVENT)
    assert (done.cookie, done.status) == (5, 0)
    assert bytes(b.view[16:24]) == b"accepted"


def test_post_recv_is_valid_in_every_state(hosts: tuple[Host, Host]) -> None:
    """dat_ep_post_recv (section 1d) | Valid in every state (pre-post before connect);
    immediately flushed if the EP is DISCONNECTED"""
    a, b = hosts
    # pre-posted in UNCONNECTED on both sides, then used once connected
    x, y = a.end(), b.end()
    x.ep.post_recv([a.triplet(100, 64)], cookie=201)
    y.ep.post_recv([b.triplet(100, 64)], cookie=202)
    assert x.ep.get_status() == (S.UNCONNECTED, False, True)
    connect(a, b, 190, x=x, y=y)
    a.view[:4] = b"a->b"
    b.view[8:12] = b"b->a"
    x.ep.post_send([a.triplet(0, 4)], cookie=203)
    y.ep.post_send([b.triplet(8, 4)], cookie=204)
    got_b = expect(y.recv, E.DTO_COMPLETION_EVENT)
    assert (got_b.cookie, got_b.status, got_b.transfered_length) == (202, 0, 4)
    got_a = expect(x.recv, E.DTO_COMPLETION_EVENT)
    assert (got_a.cookie, got_a.status, got_a.transfered_length) == (201, 0, 4)
    assert bytes(b.view[100:104]) == b"a->b" and bytes(a.view[100:104]) == b"b->a"
    # accepted (no synchronous error) in every state; DISCONNECTED flushes it at once
    for cq, state in enumerate(REACHABLE, 192):
        end = stage(state, a, b, cq)
        h = b if state in (S.RESERVED, S.PASSIVE_CONNECTION_PENDING, S.COMPLETION_PENDING) else a
        end.ep.post_recv([h.triplet(512, 64)], cookie=300 + state)
        assert_state(end, state)
        if state == S.DISCONNECTED:
            expect_flushed(end.recv, [300 + state], [Dtos.RECEIVE])
        else:
            assert end.ep.get_status()[1] is False, "the receive is outstanding"


# -- the ordering paragraph ----------------------------------------------------------------------


def test_the_active_sides_established_pdata_stays_valid_until_free_or_reset(
    hosts: tuple[Host, Host],
) -> None:
    """Ordering: 'the active side's ESTABLISHED pdata stays valid until ep_free or ep_reset'.
    The private data of the active side's ESTABLISHED event still reads as the accept's after
    the connection carried traffic, after another connection was made with other private data,
    and after the EP was disconnected; ep_reset is the first call that may end it."""
    a, b = hosts
    x, y, request = pend_passive(a, b, 210)
    request.cr_handle.accept(y.ep, b"first accept pdata")
    established = expect(x.conn, E.CONNECTION_EVENT_ESTABLISHED)
    expect(y.conn, E.CONNECTION_EVENT_ESTABLISHED)
    assert established.private_data == b"first accept pdata"
    a.view[:8] = b"traffic!"
    x.ep.post_rdma_write([a.triplet(0, 8)], 211, b.lmr.remote(0, 8))
    assert expect(x.req, E.DTO_COMPLETION_EVENT).status == 0
    other, _ = connect(a, b, 212, accept_pdata=b"another accept, longer pdata")
    assert established.private_data == b"first accept pdata"
    x.ep.disconnect(CloseFlags.ABRUPT)
    expect(x.conn, E.CONNECTION_EVENT_DISCONNECTED)
    assert_state(x, S.DISCONNECTED)
    assert established.private_data == b"first accept pdata"
    x.ep.reset()
    assert_state(x, S.UNCONNECTED)
    other.ep.free()
