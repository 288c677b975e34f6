"""Send/Receive through real daemons and shared memory: data, cookies, and what each completion
reports. Receive-not-ready order and SUPPRESS are tested in memory, in tests/core/test_rc.py."""

from __future__ import annotations

from fabricd.launch import Node
from proto.constants import Dtos, EventNumber
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
