"""Faults through real daemons: what only the shell can show — partitions over real sockets that
heal, a daemon process that crashes or is paused, the rules of several daemons cleared at once.
Every fault action's effect on the RC service is tested in memory, in
tests/core/test_fault_actions.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from client.faults import Faults
from fabricd.launch import Node
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from tests.conftest import StartNode
from tests.integration.flows import Pair, connect_pair, memfds, wait_event

FAST = ["--heartbeat-interval", "0.2", "--heartbeat-timeout", "1.0"]


@pytest.fixture
def fabric(start: StartNode) -> Iterator[tuple[Node, Node, Faults]]:
    a, b = start("n1", extra=FAST), start("n2", extra=FAST)
    with Faults({"n1": a.socket, "n2": b.socket}) as faults:
        yield a, b, faults


def _pair(a: Node, b: Node, conn_qual: int = 4000) -> Pair:
    return connect_pair(a.socket, b.socket, b.address, conn_qual=conn_qual)


def _write(p: Pair, cookie: int, n: int = 64, at: int = 0) -> None:
    p.ep_a.post_rdma_write([p.lmr_a.triplet(0, n)], cookie, p.lmr_b.remote(at, n))


@pytest.mark.parametrize("mode", ["blackhole", "reset"])
def test_a_partition_breaks_connections_and_heals(
    fabric: tuple[Node, Node, Faults], mode: str
) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        faults.partition([["n1"], ["n2"]], mode=mode)
        _write(p, 1)
        error = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
        assert error.status in (St.DTO_ERR_TRANSPORT, St.DTO_ERR_FLUSHED)
        assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
        ep = p.ia_a.ep_create(p.ia_a.pz_create(), p.evd_a, p.evd_a, p.evd_a)
        # within the heartbeat timeout (1 s): after it, n2 closes the stream that never
        # authenticated, and the blackhole does not hide a TCP stream's end (UNREACHABLE)
        ep.connect(b.address, 4001, 800_000)
        expected = (
            E.CONNECTION_EVENT_TIMED_OUT
            if mode == "blackhole"
            else (E.CONNECTION_EVENT_UNREACHABLE)
        )
        assert wait_event(p.evd_a, expected).ep == ep.handle
        assert faults.heal() == 0
        assert faults.rules() == {"n1": [], "n2": []}
    finally:
        p.close()
    healed = _pair(a, b, conn_qual=4002)
    try:
        _write(healed, 5)
        assert wait_event(healed.evd_a, E.DTO_COMPLETION_EVENT).status == 0
    finally:
        healed.close()


def test_a_crashed_node_breaks_what_it_carried(fabric: tuple[Node, Node, Faults]) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    mine = f"datfabric-{p.ia_a.core.name}-"
    assert memfds(a.proc.pid, mine), "n1 maps ia_a's queues"
    try:
        faults.crash("n2")
        b.proc.wait(10)
        _write(p, 1)
        assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
    finally:
        p.ia_a.close()
        p.ia_b.close()
    # n1 lets go of ia_a's segments once it sees the close (n2's went with its process)
    deadline = time.monotonic() + 10
    while memfds(a.proc.pid, mine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert memfds(a.proc.pid, mine) == set()


def test_clear_leaves_zero_rules(fabric: tuple[Node, Node, Faults]) -> None:
    _, _, faults = fabric
    faults.add("delay", delay_ms=1, name="one")
    faults.add("drop", probability=0.01, src="n1", name="two")
    assert sorted(r["name"] for r in faults.rules()["n1"]) == ["one", "two"]
    assert faults.clear() == 0
    assert faults.rules() == {"n1": [], "n2": []}


def test_a_paused_node_serves_nothing_until_resumed(fabric: tuple[Node, Node, Faults]) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        pid = int(faults.status("n2")["pid"])
        faults.pause("n2")
        _write(p, 1)
        with pytest.raises(Exception, match="TIMEOUT"):
            p.evd_a.wait(300_000)
        faults.resume("n2", pid)
        assert wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status == St.DTO_SUCCESS
    finally:
        p.close()
