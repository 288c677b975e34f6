"""Broken connections, with nothing lost: every outstanding DTO completes exactly once, in
posting order: the failed one with its error, then BROKEN, then the rest FLUSHED."""

from __future__ import annotations

import gc
import glob
import os
import signal
import time

import pytest

from client.api import Ia
from fabricd.launch import Node
from proto.constants import DtoCompletionStatus as St
from proto.constants import EpState, EventNumber, MemPriv, MemType
from proto.errors import DatAbort, DatQueueEmpty, DatTimeoutExpired
from tests.conformance.support import Sub, refused
from tests.conftest import StartNode
from tests.integration.flows import Pair, connect_pair, memfds, wait_event
from tests.integration.netns import two_hosts, unavailable

FAST_HEARTBEAT = ["--heartbeat-interval", "0.2", "--heartbeat-timeout", "1.0"]


def _expect_broken(p: Pair, cookies: list[int], first: St) -> None:
    """The first cookie fails with ``first``, BROKEN follows, the rest are FLUSHED."""
    error = wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT)
    assert (error.cookie, error.status) == (cookies[0], first)
    assert wait_event(p.evd_a, EventNumber.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
    flushed = [wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT) for _ in cookies[1:]]
    assert [(e.cookie, e.status) for e in flushed] == [(c, St.DTO_ERR_FLUSHED) for c in cookies[1:]]
    assert p.ep_a.state == EpState.DISCONNECTED
    with refused(DatQueueEmpty, Sub.NO_SUBTYPE):
        p.evd_a.dequeue()  # exactly once: nothing more


def test_a_peer_daemon_killed_mid_transfer(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    p = connect_pair(a.socket, b.socket, b.address, size=8 << 20)
    try:
        cookies = list(range(1, 9))
        for c in cookies:
            p.ep_a.post_rdma_write([p.lmr_a.triplet(0, 8 << 20)], c, p.lmr_b.remote())
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait()
        # some writes may have completed before the kill: they come first, successful
        done = []
        while True:
            event = wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT)
            if event.status != St.DTO_SUCCESS:
                break
            done.append(event.cookie)
        assert done == cookies[: len(done)], "completions in posting order"
        assert event.cookie == cookies[len(done)] and event.status == St.DTO_ERR_TRANSPORT
        assert wait_event(p.evd_a, EventNumber.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
        rest = [
            wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT) for _ in cookies[len(done) + 1 :]
        ]
        assert [e.cookie for e in rest] == cookies[len(done) + 1 :]
        assert all(e.status == St.DTO_ERR_FLUSHED for e in rest)
    finally:
        p.ia_a.close()


def test_a_consumer_whose_daemon_dies_gets_ia_catastrophic(start: StartNode) -> None:
    node = start("doomed")
    ia = Ia(node.socket)
    evd = ia.evd_create(4)
    node.proc.send_signal(signal.SIGKILL)
    node.proc.wait()
    event, _ = ia.async_evd.wait(5_000_000)
    assert event.event_number == EventNumber.ASYNC_ERROR_IA_CATASTROPHIC
    started = time.monotonic()
    with refused(DatAbort, Sub.NO_SUBTYPE):
        evd.wait(10_000_000)  # an error, never a hang
    assert time.monotonic() - started < 5
    with refused(DatAbort, Sub.NO_SUBTYPE):
        ia.pz_create()
    ia.close()


def test_an_ia_whose_daemon_died_removes_the_queues_the_daemon_made_for_it(
    start: StartNode,
) -> None:
    """A dead daemon's queue segments (memfds) live on in its consumer only while the IA and
    the program's buffers map them: once closed and let go, nothing maps them, and nothing was
    ever a file in /dev/shm."""
    node = start("doomed-queues")
    ia = Ia(node.socket)
    pz = ia.pz_create()
    evd = ia.evd_create(4)
    ep = ia.ep_create(pz, evd, evd, evd)
    buf = ia.alloc(64)
    lmr = ia.lmr_create(MemType.VIRTUAL, buf, 64, pz, MemPriv.ALL)
    ep.post_recv([lmr.triplet(0, 64)], 1)  # maps the work queues
    mine = memfds(os.getpid(), f"datfabric-{ia.core.name}-")
    assert any("-wq" in n for n in mine) and any("-eq" in n for n in mine), mine
    assert glob.glob(f"/dev/shm/datfabric-{ia.core.name}-*") == []
    node.proc.send_signal(signal.SIGKILL)
    node.proc.wait()
    ia.close()
    name = ia.core.name
    del ia, pz, evd, ep, buf, lmr  # what the program held: then nothing maps the queues
    gc.collect()
    assert memfds(os.getpid(), f"datfabric-{name}-") == set()


def test_the_queues_are_removed_when_frames_came_before_the_daemon_died(
    two_nodes: tuple[Node, Node],
) -> None:
    """The close reads past what the daemon sent before dying (a NOTIFY for an armed EVD) to
    its end: one read stopped at the frames, missed the death and left the queues."""
    a, b = two_nodes
    p = connect_pair(a.socket, b.socket, b.address)
    with pytest.raises(DatTimeoutExpired):
        p.evd_b.wait(1000)  # arms the empty EVD
    p.ep_a.disconnect()  # an event on it: node b sends the NOTIFY, unread
    wait_event(p.evd_a, EventNumber.CONNECTION_EVENT_DISCONNECTED)
    time.sleep(0.2)
    mine = f"datfabric-{p.ia_b.core.name}-"
    assert any("-eq" in n for n in memfds(os.getpid(), mine))
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait()
    p.ia_b.close()
    p.ia_a.close()
    del p
    gc.collect()
    assert memfds(os.getpid(), mine) == set()


def test_a_cut_link_is_detected_by_heartbeat(start: StartNode) -> None:
    why = unavailable()
    if why:
        pytest.skip(why)
    with two_hosts(index=3) as hosts:
        a = start("cut-a", host=hosts.addr[0], port=7471, netns=hosts.ns[0], extra=FAST_HEARTBEAT)
        b = start("cut-b", host=hosts.addr[1], port=7471, netns=hosts.ns[1], extra=FAST_HEARTBEAT)
        p = connect_pair(a.socket, b.socket, b.address)
        try:
            hosts.link(up=False)  # no packet will ever answer: no RST, no FIN
            cut = time.monotonic()
            p.ep_a.post_rdma_read([p.lmr_a.triplet(0, 64)], 1, p.lmr_b.remote(0, 64))
            p.ep_a.post_rdma_write([p.lmr_a.triplet(0, 64)], 2, p.lmr_b.remote(0, 64))
            _expect_broken(p, [1, 2], St.DTO_ERR_TRANSPORT)
            assert time.monotonic() - cut < 5, "detected within the heartbeat timeout"
            assert wait_event(p.evd_b, EventNumber.CONNECTION_EVENT_BROKEN).ep == p.ep_b.handle
            assert "heartbeat timeout" in a.log_text()
        finally:
            p.close()
            for node in (a, b):
                node.stop()
