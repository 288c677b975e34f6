"""Send/Receive: data, cookies, and what each completion reports."""

from __future__ import annotations

import time

from fabricd.launch import Node
from proto.constants import CompletionFlags, DatReturnType, Dtos, EventNumber
from proto.errors import DatQueueEmpty
from tests.integration.flows import connect_pair, wait_event


def test_send_carries_data_and_each_side_gets_its_own_cookie(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    pair = connect_pair(a.socket, b.socket, b.address)
    try:
        pair.view_a[:300] = bytes(i & 0xFF for i in range(300))
        pair.ep_b.post_recv([pair.lmr_b.triplet(1000, 150)], cookie=0xB1)
        # scatter: the second receive lands in two segments, front one filled first
        pair.ep_b.post_recv(
            [pair.lmr_b.triplet(2000, 120), pair.lmr_b.triplet(3000, 200)], cookie=0xB2
        )
        pair.ep_a.post_send([pair.lmr_a.triplet(0, 100)], cookie=0xA1)
        # gather: two segments of the sender make one message
        pair.ep_a.post_send(
            [pair.lmr_a.triplet(100, 50), pair.lmr_a.triplet(200, 100)], cookie=0xA2
        )
        sent = [wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT) for _ in range(2)]
        got = [wait_event(pair.evd_b, EventNumber.DTO_COMPLETION_EVENT) for _ in range(2)]
        assert [(e.cookie, e.status, e.transfered_length, e.operation) for e in sent] == [
            (0xA1, 0, 100, Dtos.SEND),
            (0xA2, 0, 150, Dtos.SEND),
        ]
        assert [(e.cookie, e.status, e.transfered_length, e.operation) for e in got] == [
            (0xB1, 0, 100, Dtos.RECEIVE),
            (0xB2, 0, 150, Dtos.RECEIVE),
        ]
        assert all(e.ep == pair.ep_a.handle for e in sent)
        assert all(e.ep == pair.ep_b.handle for e in got)
        assert bytes(pair.view_b[1000:1100]) == bytes(pair.view_a[0:100])
        message = bytes(pair.view_a[100:150]) + bytes(pair.view_a[200:300])
        assert bytes(pair.view_b[2000:2120]) == message[:120]
        assert bytes(pair.view_b[3000:3030]) == message[120:]
        assert bytes(pair.view_b[3030:3200]) == bytes(170), "past the message: untouched"
    finally:
        pair.close()


def test_a_send_waits_for_a_receive_and_suppress_hides_success(
    two_nodes: tuple[Node, Node],
) -> None:
    a, b = two_nodes
    pair = connect_pair(a.socket, b.socket, b.address)
    try:
        pair.view_a[:8] = b"early!!!"
        pair.ep_a.post_send([pair.lmr_a.triplet(0, 8)], cookie=1, flags=CompletionFlags.SUPPRESS)
        pair.ep_a.post_send([pair.lmr_a.triplet(0, 4)], cookie=2)
        try:
            pair.evd_b.dequeue()
            raise AssertionError("a receive completed before any was posted")
        except DatQueueEmpty as empty:
            assert empty.type == DatReturnType.QUEUE_EMPTY
        pair.ep_b.post_recv([pair.lmr_b.triplet(0, 64)], cookie=3)
        pair.ep_b.post_recv([pair.lmr_b.triplet(64, 64)], cookie=4)
        first = wait_event(pair.evd_b, EventNumber.DTO_COMPLETION_EVENT)
        second = wait_event(pair.evd_b, EventNumber.DTO_COMPLETION_EVENT)
        assert (first.cookie, first.transfered_length) == (3, 8)
        assert (second.cookie, second.transfered_length) == (4, 4)
        assert bytes(pair.view_b[:8]) == b"early!!!"
        # the suppressed send completed silently: only cookie 2 is reported
        done = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
        assert (done.cookie, done.status) == (2, 0)
    finally:
        pair.close()


def test_frames_behind_a_receiver_not_ready_send_run_in_order(
    two_nodes: tuple[Node, Node],
) -> None:
    """RC order: a write posted after a stalled send lands only after that send is received."""
    a, b = two_nodes
    pair = connect_pair(a.socket, b.socket, b.address)
    try:
        for i in range(6):
            pair.view_a[i * 100 : i * 100 + 100] = bytes([i + 1]) * 100
        for i in range(3):
            pair.ep_a.post_send([pair.lmr_a.triplet(i * 100, 100)], cookie=i)
            # each write overwrites the same spot: the last one to execute wins
            pair.ep_a.post_rdma_write(
                [pair.lmr_a.triplet(300 + i * 100, 100)], 10 + i, pair.lmr_b.remote(8000, 100)
            )
        time.sleep(0.2)
        assert bytes(pair.view_b[8000:8100]) == bytes(100), "a write overtook a stalled send"
        for i in range(3):
            pair.ep_b.post_recv([pair.lmr_b.triplet(1000 * i, 200)], cookie=20 + i)
            got = wait_event(pair.evd_b, EventNumber.DTO_COMPLETION_EVENT)
            assert (got.cookie, got.transfered_length) == (20 + i, 100)
            assert bytes(pair.view_b[1000 * i : 1000 * i + 100]) == bytes([i + 1]) * 100
            # the write right behind this send has run, the next ones not yet
            assert bytes(pair.view_b[8000:8100]) == bytes([4 + i]) * 100
        done = [wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT) for _ in range(6)]
        assert [e.cookie for e in done] == [0, 10, 1, 11, 2, 12]
        assert all(e.status == 0 for e in done)
    finally:
        pair.close()
