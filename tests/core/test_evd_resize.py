"""dat_evd_resize in memory: the daemon refuses a length below the events queued, enforces the
new length for overflow, moves a queue that outgrows its ring to a larger one with every queued
event and word carried over (docs/host-interface.md section 6), and a PSP's backlog follows the
length of its EVD."""

from __future__ import annotations

import pytest

from client.core import Call
from proto.constants import DatReturnSubtype as Sub
from proto.constants import Dtos, EvdFlags, PspFlags
from proto.constants import EventNumber as E
from proto.errors import (
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatQueueFull,
)
from proto.eventq import EQ_ENTRY_SIZE, EqWord, eq_segment
from proto.hostif import ASYNC_EVD, ring_bytes
from tests.core.flows import Side, address, connect, raw, side
from tests.core.harness import Fabric, SimConsumer

SW = EvdFlags.DEFAULT | EvdFlags.SOFTWARE


def _sw_evd(c: SimConsumer, qlen: int) -> int:
    evd: int = c.call(c.core.evd_create(qlen, SW))
    return evd


def _post(c: SimConsumer, evd: int, *pointers: object) -> None:
    for pointer in pointers:
        c.call(c.core.evd_post_se(evd, pointer))


def test_a_length_below_the_queued_events_is_invalid_state_and_changes_nothing() -> None:
    fabric = Fabric()
    c = fabric.add_consumer(fabric.add_node("n1"))
    evd = _sw_evd(c, 8)
    _post(c, evd, "a", "b", "c")
    with pytest.raises(DatInvalidState) as err:
        c.call(c.core.evd_resize(evd, 2))
    assert err.value.code & 0xFFFF == Sub.NO_SUBTYPE
    assert c.core.evds[evd].qlen == 8
    c.call(c.core.evd_resize(evd, 3))  # exactly the events queued: allowed
    with pytest.raises(DatQueueFull):
        _post(c, evd, "d")
    assert [e.pointer for e in c.events(evd)] == ["a", "b", "c"]


def test_argument_errors_of_the_client_and_of_the_daemon() -> None:
    fabric = Fabric()
    c = fabric.add_consumer(fabric.add_node("n1"))
    evd = _sw_evd(c, 4)
    for bad in (0, -1):
        with pytest.raises(DatInvalidParameter) as err:
            c.call(c.core.evd_resize(evd, bad))
        assert err.value.code & 0xFFFF == Sub.INVALID_ARG2
        with pytest.raises(DatInvalidParameter) as err:
            c.call(raw("evd_resize", evd, bad))  # past the library: the daemon's own check
        assert err.value.code & 0xFFFF == Sub.INVALID_ARG2
    with pytest.raises(DatInvalidParameter):
        c.call(raw("evd_resize", evd, (1 << 16) + 1))
    with pytest.raises(DatInvalidHandle) as handle:
        c.call(raw("evd_resize", 999, 4))
    assert handle.value.code & 0xFFFF == Sub.INVALID_HANDLE_EVD_REQUEST
    with pytest.raises(DatInvalidHandle):
        c.call(c.core.evd_resize(999, 4))


def test_a_shrunk_evd_overflows_at_its_new_length() -> None:
    fabric = Fabric()
    a = side(fabric, fabric.add_node("n1"), qlen=64)
    b = side(fabric, fabric.add_node("n2"))
    connect(fabric, a, b)
    a.c.call(a.c.core.evd_resize(a.evd, 2))
    assert a.c.core.evds[a.evd].ring is not None
    for cookie in range(4):
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], cookie, b.rmr(0, 8), 0)
        fabric.run()
    assert [e.cookie for e in a.events()] == [0, 1], "the new length, not the ring, is the limit"
    assert [(e.event_number, e.handle) for e in a.c.events(ASYNC_EVD)] == [
        (E.ASYNC_ERROR_EVD_OVERFLOW, a.evd)
    ]


def test_growing_past_the_ring_moves_the_queue_and_keeps_every_event() -> None:
    fabric = Fabric()
    node = fabric.add_node("n1")
    c = fabric.add_consumer(node)
    evd = _sw_evd(c, 2)
    state = c.core.evds[evd]
    _post(c, evd, 0, 1)
    assert c.core.evd_dequeue(evd).pointer == 0  # the consumer index moves off 0
    _post(c, evd, 2)
    c.core.arm([state], 1)  # an ARM of the old ring, answered by the new one
    old = state.ring
    assert old is not None and old.entries == 2
    c.call(c.core.evd_resize(evd, 100))
    ring = state.ring
    assert ring is not None and ring is not old and ring.entries == 128
    name = eq_segment(c.name, evd)
    assert len(node.memory.segments[name]) == ring_bytes(128, EQ_ENTRY_SIZE)
    assert ring.mine == 1 and ring.get(EqWord.ARM) == old.get(EqWord.ARM) == state.armed
    _post(c, evd, *range(3, 101))  # 98 more: 100 queued, as the new length allows
    assert ring.get(EqWord.NOTIFIED) == state.armed, "the ARM made before the move is answered"
    with pytest.raises(DatQueueFull):
        _post(c, evd, 101)
    assert [e.pointer for e in c.events(evd)] == list(range(1, 101)), "in order, none lost"
    c.call(c.core.evd_resize(evd, 4))  # shrinking keeps the ring
    assert state.ring is ring and state.qlen == 4


def test_the_async_evd_grows_too() -> None:
    fabric = Fabric()
    c = fabric.add_consumer(fabric.add_node("n1"))
    c.call(c.core.evd_resize(ASYNC_EVD, 1000))
    ring = c.core.evds[ASYNC_EVD].ring
    assert ring is not None and ring.entries == 1024


def test_a_psp_backlog_follows_the_length_of_its_evd() -> None:
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    b = side(fabric, n2)
    cr_evd = b.c.call(b.c.core.evd_create(1, EvdFlags.DEFAULT))
    b.c.call(b.c.core.psp_create(9, cr_evd, PspFlags.CONSUMER))
    actives = [side(fabric, n1) for _ in range(3)]

    def connect_one(s: Side) -> list[E]:
        s.c.call(s.c.core.ep_connect(s.ep, address(n2), 9, 10_000_000, b""))
        fabric.run()
        return s.numbers()

    assert connect_one(actives[0]) == []
    assert [e.event_number for e in b.c.events(cr_evd)] == [E.CONNECTION_REQUEST_EVENT]
    assert connect_one(actives[1]) == [E.CONNECTION_EVENT_NON_PEER_REJECTED], "backlog of 1"
    b.c.call(b.c.core.evd_resize(cr_evd, 2))
    assert connect_one(actives[2]) == []
    assert [e.event_number for e in b.c.events(cr_evd)] == [E.CONNECTION_REQUEST_EVENT]


def test_a_ring_the_node_has_no_memory_for_closes_that_ia_only() -> None:
    """Growing needs a new segment; when the node cannot make it the old ring is gone already,
    so the IA is closed (its driver sees it lost), and the daemon serves on."""
    fabric = Fabric()
    node = fabric.add_node("n1")
    c = fabric.add_consumer(node)
    evd = _sw_evd(c, 2)
    create = node.memory.create

    def no_memory(name: str, size: int) -> int:
        raise OSError(12, "out of memory")

    node.memory.create = no_memory  # type: ignore[method-assign]
    _, data = c.core.call_frame(Call("evd_resize", [evd, 100]))
    c.send(data)
    fabric.run()
    node.memory.create = create  # type: ignore[method-assign]
    assert c.core.catastrophic and "could not grow" in c.core.lost_reason
    other = fabric.add_consumer(node)
    assert type(other.call(other.core.pz_create())) is int
