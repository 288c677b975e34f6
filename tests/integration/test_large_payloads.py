"""A payload of 32 KiB or more is read from the socket straight into its place; the read that
completes it ends with it. The target handles that frame then, not when more bytes come: the
last large Write or Send of a burst completes with nothing after it on the stream (it used to
wait for the next heartbeat)."""

from __future__ import annotations

import pytest

from fabricd.launch import Node
from proto.codec import DIRECT_LANDING_MIN
from proto.constants import Dtos, EventNumber
from tests.conftest import StartNode
from tests.integration.flows import connect_pair

SIZE = 1 << 20
QUIET = ["--heartbeat-interval", "120", "--heartbeat-timeout", "360"]  # no heartbeat to help
WAIT_US = 20_000_000  # far under the heartbeat, far over a MiB's copy


@pytest.fixture
def quiet_nodes(start: StartNode) -> tuple[Node, Node]:
    """Two nodes whose peer streams carry no heartbeat within a test."""
    return start("node-a", extra=QUIET), start("node-b", extra=QUIET)


@pytest.mark.parametrize("kind", [Dtos.RDMA_WRITE, Dtos.SEND])
def test_a_large_payload_alone_on_the_stream_completes(
    quiet_nodes: tuple[Node, Node], kind: Dtos
) -> None:
    """A small Write first (its key passes the checks the long way, so the target's lane is
    open for the link), then one large Write or Send, nothing after it."""
    assert SIZE >= 2 * DIRECT_LANDING_MIN
    a, b = quiet_nodes
    pair = connect_pair(a.socket, b.socket, b.address, size=2 * SIZE)
    try:
        remote = pair.lmr_b.remote(0, SIZE)
        pair.ep_a.post_rdma_write([pair.lmr_a.triplet(0, 64)], 1, remote)
        event, _ = pair.evd_a.wait(WAIT_US)
        assert (event.event_number, event.cookie, event.status) == (
            EventNumber.DTO_COMPLETION_EVENT,
            1,
            0,
        )
        pair.view_a[:SIZE] = bytes(range(256)) * (SIZE // 256)
        if kind == Dtos.SEND:
            pair.ep_b.post_recv([pair.lmr_b.triplet(SIZE, SIZE)], 9)
            pair.ep_a.post_send([pair.lmr_a.triplet(0, SIZE)], 2)
        else:
            pair.ep_a.post_rdma_write([pair.lmr_a.triplet(0, SIZE)], 2, remote)
        event, _ = pair.evd_a.wait(WAIT_US)
        assert (event.cookie, event.status, event.transfered_length) == (2, 0, SIZE)
        landed = pair.view_b[SIZE:] if kind == Dtos.SEND else pair.view_b[:SIZE]
        assert bytes(landed) == bytes(pair.view_a[:SIZE])
    finally:
        pair.close()
