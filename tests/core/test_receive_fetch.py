"""A message that needs a receive takes the next one the driver published even when no doorbell
has announced it yet (the driver skips the doorbell while the daemon polls the EP, and a
doorbell may still be on its way): a NIC fetches the next receive WQE when a message arrives.
Such a Send lands in place, completes at once, and the late doorbell takes nothing twice; frames
held behind a Send with no receive run in their order; a fetched receive that fails its checks
breaks the EP as one taken on its doorbell does."""

from __future__ import annotations

from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos
from proto.constants import EventNumber as E
from proto.hostif import Opcode, write_wqe
from tests.core.flows import Brief, Side, connect, pair, side
from tests.core.harness import Fabric
from tests.core.test_srq import SrqSide

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
BROKEN = (E.CONNECTION_EVENT_BROKEN, b"")


def _unannounced_receive(b: Side, cookie: int, offset: int, length: int = 16) -> bytes:
    """A receive written into the EP's queue; its doorbell (b"" when one is in flight already)
    is returned, not rung."""
    return b.c.core.post(Dtos.RECEIVE, b.ep, [b.triplet(offset, length)], cookie, None, 0)


def _send(a: Side, text: bytes, cookie: int, offset: int = 0) -> None:
    a.memory(offset, len(text))[:] = text
    a.c.post(Dtos.SEND, a.ep, [a.triplet(offset, len(text))], cookie, None, 0)


def test_a_send_takes_a_receive_whose_doorbell_has_not_been_read() -> None:
    fabric, a, b = pair()
    doorbell = _unannounced_receive(b, 7, 0)
    assert doorbell, "none was in flight: the daemon knows nothing of this receive"
    _send(a, b"fetched", 1)
    fabric.run()
    assert b.log() == [(DTO, 7, OK, 7)], "completed before the doorbell was read"
    assert bytes(b.memory(0, 7)) == b"fetched"
    assert a.log() == [(DTO, 1, OK, 7)]
    b.c.send(doorbell)  # arrives late: the receive is taken already
    fabric.run()
    assert b.log() == [], "taken once"
    _send(a, b"stalls", 2)
    fabric.run()
    assert a.log() == [] and b.log() == [], "no receive is left for a second Send"


def test_frames_held_behind_a_send_run_in_order_when_receives_are_fetched() -> None:
    """Two Sends find no receive and wait, an RDMA Write waits behind them; three receives are
    written with no doorbell read; a second Write arrives: the held frames run first, in order,
    each once, then it; the third receive is left for the next Send."""
    fabric, a, b = pair()
    _send(a, b"one", 1, 0)
    _send(a, b"two", 2, 16)
    a.memory(64, 4)[:] = b"put1"
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(64, 4)], 3, b.rmr(64, 4), 0)
    fabric.run()
    assert a.log() == [] and b.log() == [] and bytes(b.memory(64, 4)) == bytes(4)
    doorbells = [_unannounced_receive(b, 100 + i, 16 * i) for i in range(3)]
    assert doorbells[0] and not any(doorbells[1:]), "one doorbell in flight covers all"
    a.memory(68, 4)[:] = b"put2"
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(68, 4)], 4, b.rmr(68, 4), 0)
    fabric.run()
    assert b.log() == [(DTO, 100, OK, 3), (DTO, 101, OK, 3)]
    assert (bytes(b.memory(0, 3)), bytes(b.memory(16, 3))) == (b"one", b"two")
    assert bytes(b.memory(64, 8)) == b"put1put2"
    assert [cookie for _, cookie, _, _ in a.log()] == [1, 2, 3, 4]
    b.c.send(doorbells[0])
    _send(a, b"five", 5, 32)
    fabric.run()
    assert b.log() == [(DTO, 102, OK, 4)] and bytes(b.memory(32, 4)) == b"five"
    assert a.log() == [(DTO, 5, OK, 4)]


def test_a_send_takes_an_srq_receive_whose_doorbell_has_not_been_read() -> None:
    fabric = Fabric()
    s = SrqSide(fabric, 1)
    a = side(fabric, fabric.add_node("a"))
    connect(fabric, a, s.side(0), conn_qual=100)
    doorbell = s.c.core.srq_post_recv(s.srq, [[s.address, 64, s.lmr.lmr_context]], 9)
    assert doorbell
    _send(a, b"shared", 1)
    fabric.run()
    assert s.received() == [(s.eps[0], 9, 6, OK)]
    assert s.memory(0, 6) == b"shared"
    s.c.send(doorbell)
    fabric.run()
    assert s.received() == []


def _bad_receive_then_send(announced: bool) -> tuple[list[Brief], list[Brief]]:
    """A receive whose buffer is another consumer's (written into the ring past the driver's
    checks), then a Send; its doorbell read before the Send arrives, or not."""
    fabric, a, b = pair()
    _, rq = b.c.core.queues(b.c.core.eps[b.ep])
    write_wqe(rq, Opcode.RECEIVE, 0, 5, [(a.address, 16, a.lmr.lmr_context)])
    rq.publish()
    if announced:
        b.c.send(b.c.core.kick())
        fabric.run()
    _send(a, b"lost", 1)
    fabric.run()
    return a.log(), b.log()


def test_a_fetched_receive_that_fails_its_checks_breaks_the_ep_as_an_announced_one_does() -> None:
    announced = _bad_receive_then_send(True)
    assert _bad_receive_then_send(False) == announced
    assert announced[1] == [(DTO, 5, St.DTO_ERR_LOCAL_PROTECTION, 0), BROKEN]
    assert announced[0] == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 1, St.DTO_ERR_FLUSHED, 0)]


def test_sends_of_a_batch_complete_before_a_fetched_receive_that_fails() -> None:
    """A SENDS batch: its first Send lands in a receive taken on its doorbell, the next one
    fetches a receive that fails its checks. The first Send's completion comes first, then
    the failed receive's, then BROKEN: a run of Sends landed together is written before a
    fetch can write anything."""
    fabric, a, b = pair()
    for cookie in (10, 11):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(16 * cookie, 16)], cookie, None, 0)
    fabric.run()
    _, rq = b.c.core.queues(b.c.core.eps[b.ep])
    write_wqe(rq, Opcode.RECEIVE, 0, 12, [(a.address, 16, a.lmr.lmr_context)])
    rq.publish()
    _send(a, b"alone", 1, 0)  # rings the doorbell: it leaves alone (a SENDS frame of one)
    _send(a, b"first", 2, 16)
    _send(a, b"second", 3, 32)
    fabric.run()
    assert [name for _, _, name, _, _ in fabric.trace if name in ("SEND", "SENDS")] == [
        "SENDS",
        "SENDS",
    ]
    assert b.log() == [
        (DTO, 10, OK, 5),
        (DTO, 11, OK, 5),
        (DTO, 12, St.DTO_ERR_LOCAL_PROTECTION, 0),
        BROKEN,
    ]
