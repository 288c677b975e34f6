"""The EVDs' event queues in shared memory (docs/host-interface.md section 6), driven by the
real client core against the real NIC: events of every kind in the order the NIC made them, a
NOTIFY only for an armed queue holding WANT events, overflow at exactly qlen, and a consumer
that corrupts its own queue loses its IA, never the daemon."""

from __future__ import annotations

import pytest

from client.records import POLL_BULK, POLL_SPIN_US
from proto.constants import DatReturnSubtype as Sub
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, EventNumber
from proto.constants import EventNumber as E
from proto.errors import DatInvalidState
from proto.eventq import EqWord
from proto.hostif import ASYNC_EVD, U32, Ring
from tests.core.flows import Side, connect, pair, side
from tests.core.harness import Fabric

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS


def _eq(s: Side, evd: int | None = None) -> Ring:
    ring = s.c.core.evds[s.evd if evd is None else evd].ring
    assert ring is not None
    return ring


def _write(a: Side, b: Side, cookie: int) -> None:
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], cookie, b.rmr(0, 8), 0)


def test_completions_and_connection_events_share_one_queue_in_production_order() -> None:
    fabric, a, b = pair()
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 7, None, 0)
    _write(a, b, 1)
    fabric.run()
    a.c.call(a.c.core.ep_disconnect(a.ep, 0))
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 8), (E.CONNECTION_EVENT_DISCONNECTED, b"")]
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 7, St.DTO_ERR_FLUSHED, 0)]


def test_an_event_keeps_its_slot_until_it_is_handed_out() -> None:
    fabric, a, b = pair()
    ring = _eq(a)
    taken = ring.mine
    for cookie in (1, 2):
        _write(a, b, cookie)
        fabric.run()
    state = a.c.core.evds[a.evd]
    a.c.core.refill(state)
    assert (len(state.queue), ring.mine) == (2, taken), "read, not yet taken: cons stays"
    assert state.pop().cookie == 1 and ring.mine == taken + 1


def test_notify_only_when_armed_and_the_queue_holds_want_events() -> None:
    fabric, a, b = pair()
    ring = _eq(a)
    _write(a, b, 1)
    fabric.run()
    assert ring.get(EqWord.NOTIFIED) == 0, "nobody armed: no NOTIFY"
    a.events()
    state = a.c.core.evds[a.evd]
    a.c.core.arm([state], 2)
    assert ring.get(EqWord.ARM) == 1 and ring.get(EqWord.WANT) == 2
    _write(a, b, 2)
    fabric.run()
    assert ring.get(EqWord.NOTIFIED) == 0, "one event of the two wanted"
    _write(a, b, 3)
    fabric.run()
    assert ring.get(EqWord.NOTIFIED) == 1, "the second answers the ARM"
    a.c.core.arm([state], 2)
    assert ring.get(EqWord.ARM) == 2, "answered: a new wait arms again"


def test_the_queue_overflows_at_exactly_qlen_and_says_so_once() -> None:
    fabric = Fabric()
    a = side(fabric, fabric.add_node("n1"), qlen=2)
    b = side(fabric, fabric.add_node("n2"))
    connect(fabric, a, b)
    a.events()
    for cookie in range(4):
        _write(a, b, cookie)
        fabric.run()
    assert _eq(a).get(EqWord.OVERFLOW) == 1
    assert [e.cookie for e in a.events()] == [0, 1], "what fitted is kept"
    overflow = a.c.events(ASYNC_EVD)
    assert [(e.event_number, e.handle) for e in overflow] == [
        (EventNumber.ASYNC_ERROR_EVD_OVERFLOW, a.evd)
    ]


@pytest.mark.parametrize("skew", [1, 64 * 1024], ids=["ahead of the producer", "past the ring"])
def test_a_consumer_index_out_of_reach_closes_that_ia_only(skew: int) -> None:
    """A consumer index behind by less than the ring cannot be told from events not yet taken
    (it only fills the EVD sooner); one ahead of the producer's, or a ring away, is garbage."""
    fabric, a, b = pair()
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 7, None, 0)
    a.events()
    ring = _eq(a)
    ring.words[ring.mine_at] = (ring.mine + skew) % U32  # the driver's own index, garbage
    _write(a, b, 1)
    fabric.run()
    assert a.c.core.catastrophic, "the IA was closed"
    assert a.c.state is not None and a.c.state.id not in a.c.node.nic.consumers
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 7, St.DTO_ERR_FLUSHED, 0)]
    other = a.c.fabric.add_consumer(a.c.node)  # the daemon serves on
    assert type(other.call(other.core.pz_create())) is int


def test_the_spin_a_wait_gets_follows_the_mean_of_the_evds_completions() -> None:
    """EvdState.spin, the time dat_evd_wait looks before it sleeps (the blocking API passes it
    to Ia._until): POLL_SPIN_US until the EVD's completions average 16 KiB, then none; none on an
    EVD that takes no DTO completions."""
    fabric, a, b = pair(size=64 * 1024)
    assert a.c.core.evds[ASYNC_EVD].spin == 0.0
    state = a.c.core.evds[a.evd]
    assert state.spin == POLL_SPIN_US / 1e6, "nothing completed yet: a wait looks first"
    for cookie in range(8):
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 64)], cookie, b.rmr(0, 64), 0)
    fabric.run()
    a.events()
    assert state.dto_bytes < POLL_BULK and state.spin == POLL_SPIN_US / 1e6
    spins = []
    for cookie in range(100, 105):
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet()], cookie, b.rmr(), 0)
        fabric.run()
        a.events()
        spins.append(state.spin)
    # a running mean of weight 1/8: the third 64 KiB completion crosses 16 KiB
    assert spins == [POLL_SPIN_US / 1e6] * 2 + [0.0] * 3


def test_completions_of_exactly_poll_bulk_bytes_make_a_wait_sleep_at_once() -> None:
    """The mean reaches a length every completion has (client.records.mean_step): POLL_BULK
    bytes each is bulk; one byte less never is."""
    fabric, a, b = pair(size=64 * 1024)
    state = a.c.core.evds[a.evd]
    for length, spin in ((POLL_BULK - 1, POLL_SPIN_US / 1e6), (POLL_BULK, 0.0)):
        for burst in range(16):
            for cookie in range(8):
                a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, length)], cookie, b.rmr(0, length), 0)
            fabric.run()
            assert a.log() == [(DTO, c, OK, length) for c in range(8)], burst
        assert (state.dto_bytes, state.spin) == (length, spin)


def test_an_evd_a_thread_waits_on_is_not_freed() -> None:
    """dat_evd_free during another thread's dat_evd_wait: DAT_INVALID_STATE, EVD_IN_USE (the
    C provider's answer too: evd_basic), and the EVD stays."""
    _, a, _ = pair()
    state = a.c.core.evds[a.evd]
    state.waiting = True  # as Evd.wait holds it while it waits
    with pytest.raises(DatInvalidState) as refused:
        a.c.call(a.c.core.evd_free(a.evd))
    assert refused.value.subtype == Sub.INVALID_STATE_EVD_IN_USE
    assert a.c.state is not None and a.evd in a.c.state.evds and a.evd in a.c.core.evds


@pytest.mark.parametrize(("length", "moderated"), [(16 * 1024, True), (16 * 1024 - 1, False)])
def test_a_wake_up_for_a_bulk_completion_waits_for_the_daemons_input_to_drain(
    length: int, moderated: bool
) -> None:
    """The NOTIFY of a queue whose newest event is a completion of 16 KiB or more goes to
    Shell.call_idle (the frame only: NOTIFIED is stored at once); a smaller one leaves now."""
    fabric, a, b = pair(size=length)
    ring = _eq(a)
    a.events()
    a.c.core.arm([a.c.core.evds[a.evd]], 1)
    idled = a.c.node.idled
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet()], 1, b.rmr(), 0)
    fabric.run()
    assert ring.get(EqWord.NOTIFIED) == 1, "the ARM is answered at once either way"
    assert a.c.node.idled - idled == moderated
