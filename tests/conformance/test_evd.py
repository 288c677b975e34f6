"""EVD and CNO semantics: thresholds, timeouts, one waiter, overflow, software events."""

from __future__ import annotations

import asyncio

import pytest

from client.aio import AsyncIa
from client.api import Ia
from fabricd.launch import Node
from proto.constants import EvdFlags, EventNumber
from proto.errors import (
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatQueueEmpty,
    DatQueueFull,
    DatTimeoutExpired,
)
from tests.conformance.support import Sub, refused
from tests.conftest import StartNode

SW = EvdFlags.DEFAULT | EvdFlags.SOFTWARE


@pytest.fixture
def node(start: StartNode) -> Node:
    return start("evd-node")


def test_wait_returns_once_threshold_events_are_queued_and_reports_nmore(node: Node) -> None:
    with Ia(node.socket) as ia:
        evd = ia.evd_create(8, SW)
        for i in range(3):
            evd.post_se(i)
        event, nmore = evd.wait(1_000_000, threshold=3)
        assert (event.event_number, event.pointer, nmore) == (EventNumber.SOFTWARE_EVENT, 0, 2)
        with refused(DatInvalidParameter, Sub.INVALID_ARG3):
            evd.wait(1000, threshold=9)  # above the queue length
        with refused(DatInvalidParameter, Sub.INVALID_ARG3):
            evd.wait(1000, threshold=0)


def test_timeout_expired_still_reports_nmore(node: Node) -> None:
    with Ia(node.socket) as ia:
        evd = ia.evd_create(8, SW)
        with refused(DatTimeoutExpired, Sub.NO_SUBTYPE) as empty:
            evd.wait(50_000)
        assert empty.value.nmore == 0
        evd.post_se("one")
        with refused(DatTimeoutExpired, Sub.NO_SUBTYPE) as short:
            evd.wait(50_000, threshold=2)
        assert short.value.nmore == 1
        assert evd.dequeue().pointer == "one", "a timed-out wait dequeues nothing"


def test_dequeue_of_an_empty_evd_is_queue_empty(node: Node) -> None:
    with Ia(node.socket) as ia:
        with refused(DatQueueEmpty, Sub.NO_SUBTYPE) as err:
            ia.evd_create(4).dequeue()
        assert err.value.code == 0x800D0000


def test_one_waiter_at_a_time_and_no_dequeue_under_a_waiter(node: Node) -> None:
    async def main() -> None:
        async with await AsyncIa.open(node.socket) as ia:
            evd = await ia.evd_create(4, SW)
            first = asyncio.ensure_future(evd.wait(5_000_000))
            await asyncio.sleep(0.05)
            with refused(DatInvalidState, Sub.INVALID_STATE_EVD_WAITER):
                await evd.wait(1000)
            with refused(DatInvalidState, Sub.INVALID_STATE_EVD_WAITER):
                evd.dequeue()
            await evd.post_se("wake")
            event, _ = await first
            assert event.pointer == "wake"
            await evd.post_se("again")
            assert evd.dequeue().pointer == "again", "the waiter is gone: dequeue works"

    asyncio.run(main())


def test_post_se_needs_the_software_flag_and_room(node: Node) -> None:
    with Ia(node.socket) as ia:
        with refused(DatInvalidParameter, Sub.INVALID_ARG1):  # the EVD is the bad argument
            ia.evd_create(2).post_se(1)
        evd = ia.evd_create(2, SW)
        evd.post_se(1)
        evd.post_se(2)
        with refused(DatQueueFull, Sub.NO_SUBTYPE):
            evd.post_se(3)


def test_overflow_raises_async_evd_overflow_and_later_waits_fail(node: Node) -> None:
    """Four events for a two-entry EVD: a rejected connect and three flushed receives."""
    with Ia(node.socket) as ia:
        small = ia.evd_create(2)
        ep = ia.ep_create(ia.pz_create(), small, small, small)
        for i in range(3):
            ep.post_recv([], cookie=i)  # valid before connecting
        ep.connect(node.address, 1, 1_000_000)  # nobody listens: rejected, receives flushed
        overflow, _ = ia.async_evd.wait(5_000_000)
        assert overflow.event_number == EventNumber.ASYNC_ERROR_EVD_OVERFLOW
        assert overflow.handle == small.handle
        with refused(DatInvalidState, Sub.INVALID_STATE_EVD_IN_USE):
            small.wait(1000)
        state = ia.core.evd(small.handle)
        ia.core.refill(state)
        assert len(state.queue) == 2, "what fitted is kept"


def test_a_cno_wakes_on_any_of_its_evds(node: Node) -> None:
    with Ia(node.socket) as ia:
        cno = ia.cno_create()
        a = ia.evd_create(4, SW, cno)
        b = ia.evd_create(4, SW, cno)
        with refused(DatTimeoutExpired, Sub.NO_SUBTYPE):
            cno.wait(50_000)
        b.post_se("b")
        assert cno.wait(1_000_000).handle == b.handle
        assert b.dequeue().pointer == "b"
        a.post_se("a")
        assert cno.wait(1_000_000).handle == a.handle
        with refused(DatInvalidState, Sub.INVALID_STATE_CNO_IN_USE):
            cno.free()  # EVDs are attached
        a.dequeue()
        a.free()
        b.free()
        cno.free()
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_CNO):
            cno.wait(1000)
