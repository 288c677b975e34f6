"""Every remote access is checked against its rmr_context: key, privilege and range.

A refused access completes at the initiator with DAT_DTO_ERR_REMOTE_ACCESS, breaks the
connection (BROKEN on both sides) and flushes what was posted after it, in order.
"""

from __future__ import annotations

import pytest

from client.api import Ia
from fabricd.launch import Node
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, EpState, EventNumber, MemPriv, MemType
from tests.integration.flows import Pair, connect_pair, wait_event


def _refused(pair: Pair, post: str, remote: list[int]) -> None:
    ep = pair.ep_a
    getattr(ep, post)([pair.lmr_a.triplet(0, 64)], 1, remote)
    ep.post_rdma_write([pair.lmr_a.triplet(0, 8)], 2, pair.lmr_b.remote(0, 8))
    ep.post_rdma_write([pair.lmr_a.triplet(0, 8)], 3, pair.lmr_b.remote(0, 8))
    first = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
    assert (first.cookie, first.status) == (1, St.DTO_ERR_REMOTE_ACCESS)
    broken = wait_event(pair.evd_a, EventNumber.CONNECTION_EVENT_BROKEN)
    assert broken.ep == ep.handle and ep.state == EpState.DISCONNECTED
    flushed = [wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT) for _ in range(2)]
    assert [(e.cookie, e.status) for e in flushed] == [
        (2, St.DTO_ERR_FLUSHED),
        (3, St.DTO_ERR_FLUSHED),
    ]
    assert wait_event(pair.evd_b, EventNumber.CONNECTION_EVENT_BROKEN).ep == pair.ep_b.handle
    assert bytes(pair.view_b[:64]) == bytes(64), "a refused write must not land"


@pytest.mark.parametrize(
    ("post", "fault"), [("post_rdma_write", "past the end"), ("post_rdma_read", "wrong key")]
)
def test_bad_remote_access_breaks_the_connection(
    two_nodes: tuple[Node, Node], post: str, fault: str
) -> None:
    a, b = two_nodes
    pair = connect_pair(a.socket, b.socket, b.address, size=4096)
    try:
        address, _, key = pair.lmr_b.remote(0, 64)
        remote = {
            "wrong key": [address, 64, key ^ 0x5A5A],
            "past the end": [address + 4096 - 32, 64, key],
            "before the start": [address - 16, 64, key],
        }[fault]
        _refused(pair, post, remote)
    finally:
        pair.close()


def test_no_remote_privilege_means_no_rmr_context(two_nodes: tuple[Node, Node]) -> None:
    a, _ = two_nodes
    with Ia(a.socket) as ia:
        pz = ia.pz_create()
        local = ia.lmr_create(
            MemType.VIRTUAL, ia.alloc(64), 64, pz, MemPriv.LOCAL_READ | MemPriv.LOCAL_WRITE
        )
        remote = ia.lmr_create(MemType.VIRTUAL, ia.alloc(64), 64, pz, MemPriv.REMOTE_READ)
        assert local.rmr_context == 0 and remote.rmr_context != 0
        assert local.lmr_context != remote.lmr_context


def test_writes_and_reads_within_range_land_exactly(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    pair = connect_pair(a.socket, b.socket, b.address, size=4096)
    try:
        pair.view_a[:100] = b"w" * 100
        pair.view_b[:] = b"." * 4096
        pair.ep_a.post_rdma_write([pair.lmr_a.triplet(0, 100)], 1, pair.lmr_b.remote(3996, 100))
        done = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
        assert (done.status, done.operation, done.transfered_length) == (0, Dtos.RDMA_WRITE, 100)
        assert bytes(pair.view_b) == b"." * 3996 + b"w" * 100, "not one byte outside the range"
    finally:
        pair.close()
