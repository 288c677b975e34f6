"""The EVD and CNO calls beside create/wait/dequeue/free, against real daemons, in the three
APIs: dat_evd_query, dat_evd_enable/disable (a disabled EVD wakes no CNO waiter),
dat_evd_set_unwaitable/clear_unwaitable, dat_evd_modify_cno, dat_evd_resize (DAT_INVALID_STATE
below the events queued; the new length is the limit; a queue that outgrows its ring is mapped
again at the segment desk with every event kept), dat_cno_query and dat_cno_modify_agent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from client.aio import AsyncIa
from client.api import Cno, Evd, Ia
from client.core import Event
from client.dat import (
    Ref,
    dat_cno_create,
    dat_cno_free,
    dat_cno_query,
    dat_cno_wait,
    dat_evd_create,
    dat_evd_dequeue,
    dat_evd_modify_cno,
    dat_evd_post_se,
    dat_evd_query,
    dat_evd_resize,
)
from fabricd.launch import Node
from proto.constants import (
    DAT_SUCCESS,
    EvdFlags,
    EventNumber,
    HandleType,
    ProxyType,
)
from proto.constants import EvdState as St
from proto.errors import DatInvalidState, DatQueueFull, DatTimeoutExpired
from proto.hostif import ASYNC_EVD
from tests.conformance.support import Sub, assert_code, refused

SW = EvdFlags.DEFAULT | EvdFlags.SOFTWARE
SE = EventNumber.SOFTWARE_EVENT


@pytest.fixture
def node(nodes: tuple[Node, Node]) -> Node:
    return nodes[0]


def test_evd_query_reports_length_state_cno_and_flags(node: Node) -> None:
    with Ia(node.socket) as ia:
        cno = ia.cno_create()
        evd = ia.evd_create(6, SW, cno)
        param = evd.query()
        assert (param["ia"], param["evd_qlen"], param["evd_flags"]) == (ia, 6, SW)
        assert param["cno"].handle == cno.handle
        assert param["evd_state"] == St.ENABLED | St.WAITABLE
        evd.disable()
        evd.set_unwaitable()
        assert evd.query()["evd_state"] == St.DISABLED | St.UNWAITABLE
        evd.enable()
        evd.clear_unwaitable()
        assert evd.query()["evd_state"] == St.ENABLED | St.WAITABLE
        assert ia.evd_create(2).query()["cno"] is None
        flat = Ref[dict[str, object]]()
        assert dat_evd_query(evd, 0, flat) == DAT_SUCCESS and flat.value is not None
        assert flat.value["evd_qlen"] == 6


def test_a_disabled_evd_queues_events_but_wakes_no_cno_waiter(node: Node) -> None:
    with Ia(node.socket) as ia:
        cno = ia.cno_create()
        evd = ia.evd_create(4, SW, cno)
        evd.disable()
        evd.post_se("quiet")
        with refused(DatTimeoutExpired, Sub.NO_SUBTYPE):
            cno.wait(50_000)
        assert evd.dequeue().pointer == "quiet", "the event was queued all the same"
        evd.enable()
        evd.post_se("loud")
        assert cno.wait(1_000_000).handle == evd.handle


def test_an_unwaitable_evd_refuses_waits_and_wakes_its_waiter(node: Node) -> None:
    with Ia(node.socket) as ia:
        evd = ia.evd_create(4, SW)
        evd.set_unwaitable()
        with refused(DatInvalidState, Sub.INVALID_STATE_EVD_UNWAITABLE):
            evd.wait(1000)
        evd.post_se(1)
        assert evd.dequeue().pointer == 1, "dequeue still works"
        evd.clear_unwaitable()
        evd.post_se(2)
        assert evd.wait(1_000_000)[0].pointer == 2

    async def main() -> None:
        async with await AsyncIa.open(node.socket) as aia:
            aevd = await aia.evd_create(4, SW)
            waiter = asyncio.ensure_future(aevd.wait(10_000_000))
            await asyncio.sleep(0.05)
            aevd.set_unwaitable()
            with refused(DatInvalidState, Sub.INVALID_STATE_EVD_UNWAITABLE):
                await waiter

    asyncio.run(main())


def test_modify_cno_moves_the_evd_to_another_cno_or_none(node: Node) -> None:
    with Ia(node.socket) as ia:
        first, second = ia.cno_create(), ia.cno_create()
        evd = ia.evd_create(4, SW, first)
        with refused(DatInvalidState, Sub.INVALID_STATE_CNO_IN_USE):
            first.free()
        evd.modify_cno(second)
        first.free()  # nothing attached any more
        evd.post_se("x")
        assert second.wait(1_000_000).handle == evd.handle
        evd.dequeue()
        evd.modify_cno(None)
        assert evd.query()["cno"] is None
        evd.post_se("y")
        with refused(DatTimeoutExpired, Sub.NO_SUBTYPE):
            second.wait(50_000)
        second.free()


def test_cno_query_and_modify_agent(node: Node) -> None:
    with Ia(node.socket) as ia:
        cno = ia.cno_create(agent=("proxy", 1))
        assert cno.query() == {"ia": ia, "proxy_type": ProxyType.AGENT, "agent": ("proxy", 1)}
        cno.modify_agent("other")
        assert cno.query()["agent"] == "other"
        assert ia.get_handle_type(cno) == HandleType.CNO


def test_resize_below_the_queued_events_is_invalid_state(node: Node) -> None:
    with Ia(node.socket) as ia:
        evd = ia.evd_create(8, SW)
        for i in range(3):
            evd.post_se(i)
        with refused(DatInvalidState, Sub.NO_SUBTYPE):
            evd.resize(2)
        evd.resize(3)
        assert evd.query()["evd_qlen"] == 3
        with refused(DatQueueFull, Sub.NO_SUBTYPE):
            evd.post_se(3)  # the daemon holds the EVD to its new length
        assert [evd.dequeue().pointer for _ in range(3)] == [0, 1, 2]


def test_growing_an_evd_past_its_ring_keeps_every_event(node: Node) -> None:
    """The daemon replaces the ring (2 slots) by one of 512; the client maps the new segment
    at the desk and takes the queued events first, then the new ones, in order."""
    with Ia(node.socket) as ia:
        evd = ia.evd_create(2, SW)
        evd.post_se("a")
        evd.post_se("b")
        assert evd.dequeue().pointer == "a"
        evd.post_se("c")
        evd.resize(300)
        for i in range(298):
            evd.post_se(i)
        with refused(DatQueueFull, Sub.NO_SUBTYPE):
            evd.post_se("one too many")
        got = [evd.wait(1_000_000)[0].pointer for _ in range(300)]
        assert got == ["b", "c", *range(298)]
        ia.async_evd.resize(64)
        assert ia.core.evds[ASYNC_EVD].qlen == 64


def test_the_flat_evd_and_cno_calls(node: Node) -> None:
    with Ia(node.socket) as ia:
        cno_ref, evd_ref, woken = Ref[Cno](), Ref[Evd](), Ref[Evd]()
        assert dat_cno_create(ia, None, cno_ref) == DAT_SUCCESS
        cno = cno_ref.value
        assert cno is not None
        assert dat_evd_create(ia, 2, cno, SW, evd_ref) == DAT_SUCCESS
        evd = evd_ref.value
        assert evd is not None
        assert dat_evd_post_se(evd, Event(SE, 0, pointer="p")) == DAT_SUCCESS
        assert dat_cno_wait(cno, 1_000_000, woken) == DAT_SUCCESS
        assert woken.value is not None and woken.value.handle == evd.handle
        param = Ref[dict[str, Any]]()
        assert dat_cno_query(cno, 0, param) == DAT_SUCCESS and param.value is not None
        assert param.value["proxy_type"] == ProxyType.AGENT
        assert dat_evd_resize(evd, 100) == DAT_SUCCESS
        got = Ref[Event]()
        assert dat_evd_dequeue(evd, got) == DAT_SUCCESS and got.value is not None
        assert got.value.pointer == "p"
        assert_code(dat_cno_free(cno), DatInvalidState, Sub.INVALID_STATE_CNO_IN_USE)
        assert dat_evd_modify_cno(evd, None) == DAT_SUCCESS
        assert dat_cno_free(cno) == DAT_SUCCESS
