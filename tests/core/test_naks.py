"""NAKs the initiator receives (dat_ep_post_rdma_write's error path): a NAK of request n says
every request before n executed, so those complete successfully even before their ACK, and n
fails with the NAK's status; a NAK of a request already acknowledged, or naming no request,
completes nothing twice and still breaks the connection; a NAK with an unknown status is a
protocol error of the peer daemon."""

from __future__ import annotations

import pytest

from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos
from proto.constants import EventNumber as E
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, pair
from tests.core.harness import Fabric, inject

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
BROKEN = (E.CONNECTION_EVENT_BROKEN, b"")


def _writes(fabric: Fabric, a: Side, b: Side, *cookies: int) -> None:
    for cookie in cookies:
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], cookie, b.rmr(8 * cookie, 8), 0)
    fabric.run()


def _nak(fabric: Fabric, a: Side, b: Side, seq: object, status: int) -> None:
    """A NAK from b's daemon to a's, as if b's daemon had sent it."""
    inject(fabric.pipe(b.c.node, a.c.node), FrameType.NAK, seq, status)
    fabric.run()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_nak_completes_what_came_before_it_then_fails_its_request(n: int) -> None:
    """Writes 1-3 executed at b up to n, their ACK delayed; a NAK of n: the writes before n
    succeed, n fails with the NAK's status, the connection breaks, the writes after n are
    flushed; the late ACK changes nothing."""
    fabric, a, b = pair()
    add_rule(b.c, action="delay", op="ACK", delay_ms=100.0)
    _writes(fabric, a, b, 1, 2, 3)
    assert a.log() == []
    _nak(fabric, a, b, n, St.DTO_ERR_REMOTE_ACCESS)
    assert a.log() == [
        *[(DTO, cookie, OK, 8) for cookie in range(1, n)],
        (DTO, n, St.DTO_ERR_REMOTE_ACCESS, 0),
        BROKEN,
        *[(DTO, cookie, St.DTO_ERR_FLUSHED, 0) for cookie in range(n + 1, 4)],
    ]
    fabric.advance(1.0)
    assert a.log() == []


def test_a_nak_of_the_first_unacknowledged_request_fails_that_one() -> None:
    """Write 1 acknowledged, write 2 outstanding (its ACK delayed): a NAK of 2 fails 2 with the
    NAK's status; 1 is not completed again."""
    fabric, a, b = pair()
    _writes(fabric, a, b, 1)
    assert a.log() == [(DTO, 1, OK, 8)]
    add_rule(b.c, action="delay", op="ACK", delay_ms=100.0)
    _writes(fabric, a, b, 2, 3)
    _nak(fabric, a, b, 2, St.DTO_ERR_REMOTE_RESPONDER)
    assert a.log() == [
        (DTO, 2, St.DTO_ERR_REMOTE_RESPONDER, 0),
        BROKEN,
        (DTO, 3, St.DTO_ERR_FLUSHED, 0),
    ]
    fabric.advance(1.0)
    assert a.log() == []


def test_a_nak_of_a_request_already_acknowledged_completes_nothing_twice() -> None:
    """Writes 1 and 2 acknowledged and completed; a (stale) NAK of 1: no completion, the
    connection breaks; the peer is not told by DISCONNECT (the stream's end tells it)."""
    fabric, a, b = pair()
    _writes(fabric, a, b, 1, 2)
    assert a.log() == [(DTO, 1, OK, 8), (DTO, 2, OK, 8)]
    _nak(fabric, a, b, 1, St.DTO_ERR_REMOTE_ACCESS)
    assert a.log() == [BROKEN]
    assert b.log() == [BROKEN]
    assert list(fabric.frames(FrameType.DISCONNECT)) == []


def test_a_nak_naming_no_request_still_breaks_the_connection() -> None:
    """A NAK whose sequence number is not an integer: the outstanding write fails with the
    NAK's status and the connection breaks (no crash of the daemon)."""
    fabric, a, b = pair()
    add_rule(b.c, action="delay", op="ACK", delay_ms=100.0)
    _writes(fabric, a, b, 1)
    _nak(fabric, a, b, None, St.DTO_ERR_REMOTE_ACCESS)
    assert a.log() == [(DTO, 1, St.DTO_ERR_REMOTE_ACCESS, 0), BROKEN]


def test_a_nak_with_an_unknown_status_is_a_protocol_error() -> None:
    """The stream from that peer closes with an ERROR naming the NAK; the EP breaks and the
    write completes as a transport error."""
    fabric, a, b = pair()
    add_rule(b.c, action="delay", op="ACK", delay_ms=100.0)
    _writes(fabric, a, b, 1)
    _nak(fabric, a, b, 1, 0xBAD)
    assert a.log() == [(DTO, 1, St.DTO_ERR_TRANSPORT, 0), BROKEN]
    [(_, _, [message])] = fabric.frames(FrameType.ERROR)
    assert "NAK with unknown status 2989" in message
