"""POLL stays 1 while an ACK is coming (fabricd.nic.intake: Intake._linger): what the consumer
posts meanwhile rings no doorbell and is taken when that ACK retires requests, or LINGER
seconds on; a message that waits for a receive ends it, so a receive posted for it rings."""

from __future__ import annotations

from fabricd.nic.cork import CORK_INFLIGHT
from fabricd.nic.intake import LINGER
from proto.attrs import EpAttr
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos
from proto.constants import EventNumber as E
from proto.hostif import Ring, Word
from tests.core.flows import Side, connect, side
from tests.core.harness import Fabric, Pipe

OK = St.DTO_SUCCESS
IN_FLIGHT = CORK_INFLIGHT + 8  # Writes on the wire, unacknowledged: an ACK is coming


def _lingering(sends: bool = False) -> tuple[Fabric, Side, Side, Pipe, Ring]:
    """a has IN_FLIGHT Writes on the wire whose ACK b's link holds back (or IN_FLIGHT Sends
    that wait at b for receives), and looked at its queues since (finding them empty): POLL
    stays 1. Returns the link that carries b's frames to a, and a's SQ."""
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    a = side(fabric, n1, attr=EpAttr(max_request_dtos=128), qlen=256)
    b = side(fabric, n2, attr=EpAttr(max_recv_dtos=IN_FLIGHT), qlen=256)
    connect(fabric, a, b)
    to_a = fabric.pipe(n2, n1)
    to_a.held = not sends
    kind = Dtos.SEND if sends else Dtos.RDMA_WRITE
    for cookie in range(IN_FLIGHT):
        remote = None if sends else b.rmr(cookie, 1)
        a.c.post(kind, a.ep, [a.triplet(cookie, 1)], cookie, remote, 0)
    fabric.run()
    sq = a.c.core.queues(a.c.core.eps[a.ep])[0]
    assert sq.word(Word.POLL) == 1 and sq.space() == sq.entries, "all taken, still polled"
    return fabric, a, b, to_a, sq


def _write(a: Side, b: Side, cookie: int) -> bytes:
    """Post a 1-byte Write; the doorbell the core asks for (not sent)."""
    return a.c.core.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(cookie, 1)], cookie, b.rmr(cookie, 1), 0)


def test_posts_while_an_ack_is_coming_ring_nothing_and_leave_when_it_retires_requests() -> None:
    fabric, a, b, acks, sq = _lingering()
    assert [_write(a, b, c) for c in range(IN_FLIGHT, IN_FLIGHT + 3)] == [b""] * 3
    fabric.run()
    assert sq.space() == sq.entries - 3, "left in the ring: the ACK will bring the look"
    acks.release()
    fabric.run()
    assert sq.space() == sq.entries
    assert a.log() == [(E.DTO_COMPLETION_EVENT, c, OK, 1) for c in range(IN_FLIGHT + 3)]


def test_with_nothing_retiring_a_post_waits_at_most_linger_and_then_polling_ends() -> None:
    fabric, a, b, _, sq = _lingering()
    assert _write(a, b, IN_FLIGHT) == b""
    fabric.advance(LINGER / 2)
    assert sq.space() == sq.entries - 1
    fabric.advance(LINGER / 2)
    assert sq.space() == sq.entries, "taken at the linger's end"
    fabric.advance(LINGER)
    assert sq.word(Word.POLL) == 0, "a linger in which nothing came ends the polling"
    assert _write(a, b, IN_FLIGHT + 1), "so the next post rings"


def test_a_message_waiting_for_a_receive_ends_the_linger_so_its_receive_rings() -> None:
    """Each side's requests wait on the other: a's Sends wait at b for receives, b's Send
    waits at a for one. The receive a posts for it must ring, or neither moves."""
    fabric, a, b, _, sq = _lingering(sends=True)
    b.memory(0, 4)[:] = b"ping"
    b.c.post(Dtos.SEND, b.ep, [b.triplet(0, 4)], 7, None, 0)
    fabric.run()
    assert sq.word(Word.POLL) == 0, "b's Send waits at a: no more lingering"
    doorbell = a.c.core.post(Dtos.RECEIVE, a.ep, [a.triplet(64, 4)], 99, None, 0)
    assert doorbell, "the receive rings"
    a.c.send(doorbell)
    fabric.run()
    assert a.log() == [(E.DTO_COMPLETION_EVENT, 99, OK, 4)]
    assert bytes(a.memory(64, 4)) == b"ping"
    assert b.log() == [(E.DTO_COMPLETION_EVENT, 7, OK, 4)]
    for cookie in range(IN_FLIGHT):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(cookie, 1)], cookie, None, 0)
    fabric.run()
    assert a.log() == [(E.DTO_COMPLETION_EVENT, c, OK, 1) for c in range(IN_FLIGHT)]
