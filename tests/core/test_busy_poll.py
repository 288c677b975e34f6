"""After requests retire the daemon busy-polls the EP's queues (fabricd.nic.intake:
Intake.retired): POLL 1 and a look in each loop iteration, BUSY_LOOKS of them at most (or
BUSY_POLL seconds), until one takes something. A request posted as its predecessor completes
rings no doorbell."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fabricd.nic.events import MODERATED_BYTES, Events
from fabricd.nic.intake import BUSY_LOOKS, LINGER, _spin
from proto.constants import CloseFlags, Dtos
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.hostif import PRODUCER_LINE, Ring, RingError, Word, set_u32
from tests.core.flows import Brief, Side, connect, side
from tests.core.harness import Fabric

OK = St.DTO_SUCCESS


def _pair(size: int = 4096) -> tuple[Fabric, Side, Side, Ring]:
    fabric = Fabric()
    a = side(fabric, fabric.add_node("n1"), size)
    b = side(fabric, fabric.add_node("n2"), size)
    connect(fabric, a, b)
    return fabric, a, b, a.c.core.queues(a.c.core.eps[a.ep])[0]


def _write(a: Side, b: Side, cookie: int, length: int = 1) -> bytes:
    """Post a Write of ``length`` bytes; the doorbell the core asks for (not sent yet)."""
    local, remote = a.triplet(cookie, length), b.rmr(cookie, length)
    return a.c.core.post(Dtos.RDMA_WRITE, a.ep, [local], cookie, remote, 0)


def _completed(fabric: Fabric, a: Side) -> list[Brief]:
    """Loop iterations until a's first completion is in (the rest of that iteration too)."""
    while True:
        more = fabric.step()
        if log := a.log():
            return log
        assert more, "the fabric went quiet before the Write completed"


def _steps(fabric: Fabric) -> int:
    """Loop iterations until the fabric is quiet."""
    steps = 0
    while fabric.step():
        steps += 1
    return steps


def test_a_post_made_as_its_predecessor_completes_rings_nothing_and_a_busy_look_takes_it() -> None:
    fabric, a, b, sq = _pair()
    a.c.send(_write(a, b, 0))
    assert _completed(fabric, a) == [(E.DTO_COMPLETION_EVENT, 0, OK, 1)]
    assert sq.word(Word.POLL) == 1, "busy polling after the retire"
    assert _write(a, b, 1) == b"", "so the next post rings nothing"
    fabric.step()
    assert sq.space() == sq.entries, "the next iteration's look took it"
    fabric.run()
    assert a.log() == [(E.DTO_COMPLETION_EVENT, 1, OK, 1)]
    counts = a.c.node.nic.intake.counts  # as `fabricctl node status` shows them
    assert (counts.doorbells, counts.busy_takes, counts.busy_polls) == (1, 1, 2)
    assert a.c.node.nic.admin.status()["busy_takes"] == 1
    assert (counts.takes, counts.requests) == (2, 2), "each look took one Write"


def test_a_burst_posted_before_its_doorbell_is_taken_by_one_look() -> None:
    fabric, a, b, _ = _pair()
    doorbells = [_write(a, b, cookie) for cookie in range(5)]
    assert doorbells[0] and doorbells[1:] == [b""] * 4, "one doorbell covers the burst"
    a.c.send(doorbells[0])
    fabric.run()
    assert [cookie for _, cookie, _, _ in a.log()] == list(range(5))
    counts = a.c.node.nic.intake.counts
    assert (counts.takes, counts.requests) == (1, 5)


def test_with_nothing_posted_busy_polling_ends_after_its_looks_and_the_next_post_rings() -> None:
    fabric, a, b, sq = _pair()
    a.c.send(_write(a, b, 0))
    _completed(fabric, a)
    assert BUSY_LOOKS - 1 <= _steps(fabric) <= BUSY_LOOKS + 1, "one look per loop iteration"
    assert sq.word(Word.POLL) == 0
    counts = a.c.node.nic.intake.counts
    assert (counts.busy_polls, counts.busy_looks, counts.busy_takes) == (1, BUSY_LOOKS, 0)
    doorbell = _write(a, b, 1)
    assert doorbell, "busy polling ended: the post rings"
    a.c.send(doorbell)
    fabric.run()
    assert a.log() == [(E.DTO_COMPLETION_EVENT, 1, OK, 1)]


def test_a_read_starts_busy_polling_once_though_its_answer_and_its_ack_each_retire() -> None:
    """A Read retires when its response lands; the ACK of the same request retires nothing
    more and leaves the running busy poll as it is (one start, one budget)."""
    fabric, a, b, sq = _pair()
    read = a.c.core.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 8)], 0, b.rmr(0, 8), 0)
    a.c.send(read)
    assert _completed(fabric, a) == [(E.DTO_COMPLETION_EVENT, 0, OK, 8)]
    fabric.run()
    counts = a.c.node.nic.intake.counts
    assert (counts.busy_polls, counts.busy_looks) == (1, BUSY_LOOKS)
    assert sq.word(Word.POLL) == 0


def test_a_bulk_request_that_retires_starts_no_busy_polling() -> None:
    """Its completion is MODERATED_BYTES or more: the driver sleeps on such an EVD (it does not
    spin), so its next post comes after a wake-up; looking for it would only take the core the
    other daemon copies on."""
    fabric, a, b, sq = _pair(2 * MODERATED_BYTES)
    a.c.send(_write(a, b, 0, MODERATED_BYTES))
    assert _completed(fabric, a) == [(E.DTO_COMPLETION_EVENT, 0, OK, MODERATED_BYTES)]
    assert sq.word(Word.POLL) == 0 and a.c.node.nic.intake.counts.busy_polls == 0
    assert _write(a, b, 1), "the next post rings"


def test_a_look_that_takes_a_request_ends_busy_polling() -> None:
    """What busy polling waited for came: the daemon stops looking (its core is the one the
    peer needs to answer) and POLL is 0 once the request is sent."""
    fabric, a, b, sq = _pair()
    a.c.send(_write(a, b, 0))
    _completed(fabric, a)
    fabric.pipe(b.c.node, a.c.node).held = True  # no ACK: no retire starts busy polling again
    assert _write(a, b, 1) == b""
    assert _steps(fabric) <= 2, "no more looks after the one that took it"
    assert sq.word(Word.POLL) == 0 and sq.space() == sq.entries


def test_a_busy_look_that_takes_the_next_request_ends_the_polling_in_its_own_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing was outstanding (request-reply: the consumer posted as the last request
    completed): the busy look that takes the post clears POLL, fences and looks once more
    at once (Intake.drain), not at the end of the turn. A post made as the request reaches
    the peer, in the same turn, sees POLL 0 and rings; nothing looks for it."""
    fabric, a, b, sq = _pair()
    a.c.send(_write(a, b, 0))
    _completed(fabric, a)
    requests = fabric.pipe(a.c.node, b.c.node)
    deliver, doorbells = requests.deliver, list[bytes]()

    def posting(data: bytes) -> None:  # the consumer, on the other CPU, posts meanwhile
        if not doorbells:
            doorbells.append(_write(a, b, 3))
        deliver(data)

    monkeypatch.setattr(requests, "deliver", posting)
    acks = fabric.pipe(b.c.node, a.c.node)
    acks.held = True  # no retire looks either
    assert [_write(a, b, 1), _write(a, b, 2)] == [b"", b""], "busy polling: no doorbell"
    fabric.step()
    assert doorbells[0], "POLL 0 already: the post made as the request arrived rings"
    fabric.run()
    assert sq.space() == sq.entries - 1, "and waits for its doorbell: nothing looked again"
    counts = a.c.node.nic.intake.counts
    assert (counts.settled, counts.busy_takes, counts.takes, counts.requests) == (1, 1, 2, 3)
    a.c.send(doorbells[0])
    assert sq.space() == sq.entries
    acks.release()
    fabric.run()
    assert [cookie for _, cookie, _, _ in a.log()] == [1, 2, 3]
    assert counts.settled == 1, "a take behind outstanding requests settles nothing"


def test_requests_that_retire_after_the_ep_left_connected_start_no_busy_polling() -> None:
    """A graceful disconnect waits for the Write in flight; its ACK retires it, and the EP,
    no longer CONNECTED, takes no more requests: nothing to poll for."""
    fabric, a, b, sq = _pair()
    acks = fabric.pipe(b.c.node, a.c.node)
    acks.held = True
    a.c.send(_write(a, b, 0))
    fabric.run()
    a.c.call(a.c.core.ep_disconnect(a.ep, CloseFlags.GRACEFUL), run=False)
    acks.release()
    assert _steps(fabric) <= 3, "no looks after the retire"
    assert sq.word(Word.POLL) == 0
    assert (E.DTO_COMPLETION_EVENT, 0, OK, 1) in a.log()


@pytest.mark.interpreted
@pytest.mark.parametrize("kind", [Dtos.RDMA_WRITE, Dtos.RDMA_READ], ids=["write", "read"])
def test_poll_is_1_before_the_completion_of_the_last_outstanding_request_is_written(
    kind: Dtos, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer on the other CPU sees its completion the moment the daemon writes it and
    posts its next request at once: POLL must already be 1 then, or that post rings a
    doorbell (Intake.emptying). Here the answer (a Write's ACK, a Read's response) is held
    until the look after the request has ended its polling (LINGER): POLL is 0 as it comes."""
    fabric, a, b, sq = _pair()
    seen: list[int] = []

    def reading_poll(write: Callable[..., None]) -> Callable[..., None]:
        def written(events: Events, *args: Any) -> None:
            seen.append(sq.word(Word.POLL))
            write(events, *args)

        return written

    for name in ("rows_done", "dtos_done"):  # a run's Writes, an Op's completion
        monkeypatch.setattr(Events, name, reading_poll(getattr(Events, name)))
    answer = fabric.pipe(b.c.node, a.c.node)
    answer.held = True
    local, remote = a.triplet(0, 8), b.rmr(0, 8)
    a.c.send(a.c.core.post(kind, a.ep, [local], 0, remote, 0))
    fabric.run()
    fabric.advance(2 * LINGER)
    assert sq.word(Word.POLL) == 0 and not a.log(), "the request is in flight, unpolled"
    answer.release()
    fabric.run()
    assert a.log() == [(E.DTO_COMPLETION_EVENT, 0, OK, 8)]
    assert seen == [1], "POLL was 1 when the completion was written"


def test_an_empty_busy_look_reads_the_send_queue_again_before_it_leaves_the_turn() -> None:
    """intake._spin, the reads an empty busy look makes before it leaves the turn: a WQE the
    driver has published is seen (``drain`` then takes it in that turn); with none, the reads
    end and the look leaves for the next loop iteration; an index past the ring is the
    driver's fault (RingError: ``poll`` closes that IA). The harness runs one thread, so no
    post can land during the reads here; the latency this buys is bench's (intake.SPIN_READS)."""
    fabric, a, b, sq = _pair()
    a.c.send(_write(a, b, 0))
    _completed(fabric, a)
    consumer = a.c.state
    assert consumer is not None
    queues = consumer.eps[a.ep].queues
    assert queues is not None and queues.busy_looks > 0, "busy polling"
    assert not _spin(queues)
    assert _write(a, b, 1) == b""
    assert _spin(queues), "the post is seen"
    set_u32(sq.view, PRODUCER_LINE, sq.mine + sq.entries + 1)
    with pytest.raises(RingError, match="past the ring"):
        _spin(queues)
