"""Every completion status and connection event a fault can cause, on demand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from client.api import Ia, Pz
from client.faults import Faults
from fabricd.launch import Node
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.constants import MemPriv
from tests.conftest import StartNode
from tests.integration.flows import connect_pair, wait_event

ERRORS = [s for s in St if s not in (St.DTO_SUCCESS, St.DTO_ERR_FLUSHED)]


@pytest.fixture
def fabric(start: StartNode) -> Iterator[tuple[Node, Node, Faults]]:
    a, b = start("n1"), start("n2")
    with Faults({"n1": a.socket, "n2": b.socket}) as faults:
        yield a, b, faults


@pytest.mark.parametrize("status", ERRORS, ids=lambda s: s.name)
@pytest.mark.parametrize("op", ["RDMA_WRITE", "RDMA_READ", "SEND"])
def test_any_error_status_on_demand(fabric: tuple[Node, Node, Faults], status: St, op: str) -> None:
    a, b, faults = fabric
    p = connect_pair(a.socket, b.socket, b.address)
    try:
        faults.add("status", status=int(status), op=op, src="n1", count=1)
        p.ep_b.post_recv([p.lmr_b.triplet(0, 64)], cookie=50)
        local, remote = [p.lmr_a.triplet(0, 8)], p.lmr_b.remote(0, 8)
        if op == "RDMA_WRITE":
            p.ep_a.post_rdma_write(local, 1, remote)
        elif op == "RDMA_READ":
            p.ep_a.post_rdma_read(local, 1, remote)
        else:
            p.ep_a.post_send(local, 1)
        p.ep_a.post_rdma_write(local, 2, remote)
        failed = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
        assert (failed.cookie, failed.status) == (1, status)
        assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
        flushed = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
        assert (flushed.cookie, flushed.status) == (2, St.DTO_ERR_FLUSHED)
    finally:
        p.close()


def test_a_bind_that_a_fault_fails(fabric: tuple[Node, Node, Faults]) -> None:
    a, b, faults = fabric
    p = connect_pair(a.socket, b.socket, b.address)
    try:
        faults.add("drop", op="RMR_BIND", src="n2")
        rmr = p.ia_b.rmr_create(Pz(p.ia_b, p.ia_b.core.ep_mirror(p.ep_b.handle).pz))
        rmr.bind(p.lmr_b, p.lmr_b.triplet(0, 64), MemPriv.REMOTE_READ, p.ep_b, cookie=7)
        bind = wait_event(p.evd_b, E.RMR_BIND_COMPLETION_EVENT)
        assert (bind.cookie, bind.status) == (7, St.RMR_OPERATION_FAILED)
        assert wait_event(p.evd_b, E.CONNECTION_EVENT_BROKEN).ep == p.ep_b.handle
    finally:
        p.close()


def _handshake(a: Node, b: Node) -> tuple[E, E]:
    """Connect with a fault in the way: the last connect-EVD event of each side."""
    ia_a, ia_b = Ia(a.socket), Ia(b.socket)
    evd_a, evd_b = ia_a.evd_create(16), ia_b.evd_create(16)
    ep_a = ia_a.ep_create(ia_a.pz_create(), evd_a, evd_a, evd_a)
    ep_b = ia_b.ep_create(ia_b.pz_create(), evd_b, evd_b, evd_b)
    ia_b.psp_create(77, evd_b)
    ep_a.connect(b.address, 77, 5_000_000)
    request, _ = evd_b.wait(5_000_000)
    ia_b.cr(request).accept(ep_b)
    active = evd_a.wait(5_000_000)[0].event_number
    if active == E.CONNECTION_EVENT_ESTABLISHED:  # then the connection broke
        active = evd_a.wait(5_000_000)[0].event_number
    passive = evd_b.wait(5_000_000)[0].event_number
    ia_a.close()
    ia_b.close()
    return active, passive


def test_a_reset_before_rtu_is_an_accept_completion_error(
    fabric: tuple[Node, Node, Faults],
) -> None:
    a, b, faults = fabric
    faults.add("reset", op="CM", src="n1", nth=3)  # HELLO, CONN_REQ, then the RTU
    active, passive = _handshake(a, b)
    assert active == E.CONNECTION_EVENT_BROKEN, "ESTABLISHED, then BROKEN"
    assert passive == E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR


def test_a_transport_error_after_hello_is_non_peer_rejected(
    fabric: tuple[Node, Node, Faults],
) -> None:
    a, b, faults = fabric
    faults.add("reset", op="CM", src="n2", nth=2)  # n2's HELLO reply goes, its accept does not
    active, passive = _handshake(a, b)
    assert active == E.CONNECTION_EVENT_NON_PEER_REJECTED
    assert passive == E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR


def test_a_bandwidth_cap_keeps_order_and_data(fabric: tuple[Node, Node, Faults]) -> None:
    a, b, faults = fabric
    p = connect_pair(a.socket, b.socket, b.address, size=1 << 20)
    try:
        faults.add("bandwidth", rate_MBps=50.0, op="RDMA_WRITE", src="n1", name="thin")
        for i in range(8):
            p.view_a[i * 65536 : (i + 1) * 65536] = bytes([i + 1]) * 65536
            p.ep_a.post_rdma_write(
                [p.lmr_a.triplet(i * 65536, 65536)], i, p.lmr_b.remote(i * 65536, 65536)
            )
        done = [wait_event(p.evd_a, E.DTO_COMPLETION_EVENT) for _ in range(8)]
        assert [(d.cookie, d.status) for d in done] == [(i, 0) for i in range(8)]
        assert bytes(p.view_b[: 8 * 65536]) == bytes(p.view_a[: 8 * 65536])
        assert len(faults.log("n1")) == 8, "every write went through the capped link"
    finally:
        p.close()
