"""dat_srq_create(3DAT), dat_srq_free, dat_srq_post_recv, dat_srq_query, dat_srq_resize,
dat_srq_set_lw and dat_ep_create_with_srq(3DAT), through the flat layer against two real
daemons: each rule of DESCRIPTION and each RETURN VALUE the fabric can show, with the exact
DAT_RETURN. (Rules the pages leave open are decided in docs/host-interface.md section 10.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from client.api import Ep, Evd, Ia, Lmr, Pz, Srq
from client.core import Event
from client.dat import (
    Ref,
    dat_ep_create_with_srq,
    dat_ep_post_recv,
    dat_evd_dequeue,
    dat_get_consumer_context,
    dat_get_handle_type,
    dat_pz_free,
    dat_set_consumer_context,
    dat_srq_create,
    dat_srq_free,
    dat_srq_post_recv,
    dat_srq_query,
    dat_srq_resize,
    dat_srq_set_lw,
)
from fabricd.launch import Node
from proto.attrs import SrqAttr
from proto.constants import (
    DAT_SUCCESS,
    Dtos,
    EvdFlags,
    EventNumber,
    HandleType,
    MemPriv,
    MemType,
    SrqAsyncErrorReason,
    SrqState,
)
from proto.errors import (
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatPrivilegesViolation,
    DatProtectionViolation,
)
from tests.conformance.support import QUALS, WAIT_US, Sub, assert_code
from tests.integration.flows import wait_event

E = EventNumber


@dataclass
class Owner:
    """An IA with a PZ, one EVD for everything, an SRQ and registered memory."""

    ia: Ia
    pz: Pz
    evd: Evd
    srq: Srq
    lmr: Lmr
    view: memoryview

    def iov(self, offset: int, length: int = 64) -> list[list[int]]:
        return [self.lmr.triplet(offset, length)]

    def query(self) -> dict[str, Any]:
        param: Ref[dict[str, Any]] = Ref()
        assert dat_srq_query(self.srq, 0xFF, param) == DAT_SUCCESS
        assert param.value is not None
        return param.value


@pytest.fixture
def owner(nodes: tuple[Node, Node]) -> Iterator[Owner]:
    ia = Ia(nodes[1].socket)
    pz = ia.pz_create()
    evd = ia.evd_create(64, EvdFlags.DEFAULT)
    srq: Ref[Srq] = Ref()
    assert dat_srq_create(ia, pz, SrqAttr(4, 2, 0), srq) == DAT_SUCCESS
    assert srq.value is not None
    buf = ia.alloc(4096)
    lmr = ia.lmr_create(MemType.VIRTUAL, buf, 4096, pz, MemPriv.ALL)
    try:
        yield Owner(ia, pz, evd, srq.value, lmr, buf.view)
    finally:
        ia.close()


def _ep(o: Owner) -> Ep:
    ep: Ref[Ep] = Ref()
    assert dat_ep_create_with_srq(o.ia, o.pz, o.evd, o.evd, o.evd, o.srq, None, ep) == DAT_SUCCESS
    assert ep.value is not None
    return ep.value


def _sender(nodes: tuple[Node, Node], o: Owner, ep: Ep) -> tuple[Ia, Ep, Evd, Lmr]:
    """A consumer on the other node connected to ``ep`` of the owner."""
    ia = Ia(nodes[0].socket)
    pz = ia.pz_create()
    evd = ia.evd_create(64, EvdFlags.DEFAULT)
    mine = ia.ep_create(pz, evd, evd, evd)
    buf = ia.alloc(4096)
    lmr = ia.lmr_create(MemType.VIRTUAL, buf, 4096, pz, MemPriv.ALL)
    qual = next(QUALS)
    psp = o.ia.psp_create(qual, o.evd)
    mine.connect((nodes[1].host, nodes[1].port), qual, WAIT_US)
    o.ia.cr(wait_event(o.evd, E.CONNECTION_REQUEST_EVENT)).accept(ep)
    wait_event(evd, E.CONNECTION_EVENT_ESTABLISHED)
    wait_event(o.evd, E.CONNECTION_EVENT_ESTABLISHED)
    psp.free()
    buf.view[:8] = b"message!"
    return ia, mine, evd, lmr


def test_a_new_srq_is_empty_attached_to_no_ep_and_at_least_as_asked(owner: Owner) -> None:
    q = owner.query()
    assert (q["srq_state"], q["max_recv_dtos"], q["max_recv_iov"]) == (SrqState.OPERATIONAL, 4, 2)
    assert (q["available_dto_count"], q["outstanding_dto_count"], q["pz"]) == (
        0,
        0,
        owner.pz.handle,
    )
    assert dat_srq_free(owner.srq) == DAT_SUCCESS, "attached to no EP: it can go at once"


@pytest.mark.parametrize(
    ("attr", "error", "subtype"),
    [
        (None, DatInvalidParameter, Sub.INVALID_ARG3),
        (SrqAttr(4, 1, 5), DatInvalidParameter, Sub.INVALID_ARG3),
        (SrqAttr(0, 1, 0), DatInvalidParameter, Sub.INVALID_ARG3),
        (SrqAttr(1 << 20, 1, 0), DatInsufficientResources, Sub.RESOURCE_SRQ),
    ],
    ids=["no attr", "low watermark past max_recv_dtos", "no receives", "past the maximum"],
)
def test_create_errors(owner: Owner, attr: SrqAttr | None, error: type[Any], subtype: Sub) -> None:
    assert_code(dat_srq_create(owner.ia, owner.pz, attr, Ref()), error, subtype)


def test_create_in_no_pz_is_an_invalid_handle(owner: Owner) -> None:
    ret = dat_srq_create(owner.ia, owner.evd, SrqAttr(4), Ref())  # type: ignore[arg-type]
    assert_code(ret, DatInvalidHandle, Sub.INVALID_HANDLE_PZ)


def test_free_while_an_ep_uses_it_is_invalid_state_srq_in_use(owner: Owner) -> None:
    ep = _ep(owner)
    assert_code(dat_srq_free(owner.srq), DatInvalidState, Sub.INVALID_STATE_SRQ_IN_USE)
    assert_code(dat_pz_free(owner.pz), DatInvalidState, Sub.INVALID_STATE_PZ_IN_USE)
    ep.free()
    assert dat_srq_free(owner.srq) == DAT_SUCCESS
    assert_code(dat_srq_post_recv(owner.srq, 0, None, 1), DatInvalidHandle, Sub.INVALID_HANDLE_SRQ)


def test_post_recv_return_values(owner: Owner) -> None:
    other_pz = owner.ia.pz_create()
    buf = owner.ia.alloc(64)
    foreign = owner.ia.lmr_create(MemType.VIRTUAL, buf, 64, other_pz, MemPriv.ALL)
    read_only = owner.ia.lmr_create(MemType.VIRTUAL, buf, 64, owner.pz, MemPriv.LOCAL_READ)
    assert_code(
        dat_srq_post_recv(owner.srq, 1, [foreign.triplet()], 1),
        DatProtectionViolation,
        Sub.NO_SUBTYPE,
    )
    assert_code(
        dat_srq_post_recv(owner.srq, 1, [read_only.triplet()], 1),
        DatPrivilegesViolation,
        Sub.NO_SUBTYPE,
    )
    outside = [[owner.lmr.registered_address + 4090, 64, owner.lmr.lmr_context]]
    assert_code(dat_srq_post_recv(owner.srq, 1, outside, 1), DatInvalidParameter, Sub.INVALID_ARG3)
    three = owner.iov(0, 8) * 3
    assert_code(dat_srq_post_recv(owner.srq, 3, three, 1), DatInvalidParameter, Sub.INVALID_ARG2)
    assert dat_srq_post_recv(owner.srq, 0, None, 1) == DAT_SUCCESS, "a zero-length receive"
    for cookie in range(3):
        assert dat_srq_post_recv(owner.srq, 1, owner.iov(64 * cookie), cookie) == DAT_SUCCESS
    ret = dat_srq_post_recv(owner.srq, 1, owner.iov(512), 9)
    assert_code(ret, DatInsufficientResources, Sub.RESOURCE_SRQ)
    assert owner.query()["available_dto_count"] == 4


def test_receives_go_to_the_ep_that_took_them_and_count_until_reaped(
    nodes: tuple[Node, Node], owner: Owner
) -> None:
    """The query page's example: post 3 -> 3/3; a message arrives -> 2/3; the completion is
    dequeued -> 2/2."""
    ep = _ep(owner)
    ia, sender, sevd, slmr = _sender(nodes, owner, ep)
    try:
        for cookie in range(3):
            assert dat_srq_post_recv(owner.srq, 1, owner.iov(64 * cookie), cookie) == DAT_SUCCESS
        q = owner.query()
        assert (q["available_dto_count"], q["outstanding_dto_count"]) == (3, 3)
        sender.post_send([slmr.triplet(0, 8)], 5)
        wait_event(sevd, E.DTO_COMPLETION_EVENT)
        for _ in range(100):
            if owner.query()["available_dto_count"] == 2:
                break
        q = owner.query()
        assert (q["available_dto_count"], q["outstanding_dto_count"]) == (2, 3)
        got: Ref[Event] = Ref()
        assert dat_evd_dequeue(owner.evd, got) == DAT_SUCCESS
        event = got.value
        assert event is not None
        assert (event.event_number, event.ep, event.cookie, event.operation) == (
            E.DTO_COMPLETION_EVENT,
            ep.handle,
            0,
            Dtos.RECEIVE,
        )
        assert bytes(owner.view[0:8]) == b"message!"
        assert owner.query()["outstanding_dto_count"] == 2
        assert_code(dat_srq_resize(owner.srq, 1), DatInvalidState, Sub.NO_SUBTYPE)
        assert dat_srq_resize(owner.srq, 2) == DAT_SUCCESS, "equal to the outstanding: allowed"
        assert_code(dat_ep_post_recv(ep, 1, owner.iov(0), 1, 0), DatInvalidState, Sub.NO_SUBTYPE)
    finally:
        ia.close()


def test_set_lw_arms_one_event_and_fires_during_the_call_when_already_below(
    owner: Owner,
) -> None:
    assert_code(dat_srq_set_lw(owner.srq, 5), DatInvalidParameter, Sub.INVALID_ARG2)
    assert dat_srq_set_lw(owner.srq, 4) == DAT_SUCCESS, "equal to max_recv_dtos: allowed"
    event = wait_event(owner.ia.async_evd, E.ASYNC_ERROR_PROVIDER_INTERNAL_ERROR)
    assert (event.handle, event.reason) == (
        owner.srq.handle,
        SrqAsyncErrorReason.LOW_WATERMARK_EVENT,
    )
    assert_code(dat_srq_resize(owner.srq, 3), DatInvalidState, Sub.NO_SUBTYPE)


def test_resize_errors(owner: Owner) -> None:
    assert_code(dat_srq_resize(owner.srq, 0), DatInvalidParameter, Sub.INVALID_ARG2)
    assert_code(dat_srq_resize(owner.srq, 1 << 20), DatInsufficientResources, Sub.RESOURCE_SRQ)
    assert dat_srq_resize(owner.srq, 8) == DAT_SUCCESS
    assert owner.query()["max_recv_dtos"] == 8


def test_ep_create_with_srq_errors(owner: Owner) -> None:
    other_pz = owner.ia.pz_create()
    ep: Ref[Ep] = Ref()
    ret = dat_ep_create_with_srq(
        owner.ia, other_pz, owner.evd, owner.evd, owner.evd, owner.srq, None, ep
    )
    assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG6)
    not_srq: Any = owner.pz
    bad = dat_ep_create_with_srq(
        owner.ia, owner.pz, owner.evd, owner.evd, owner.evd, not_srq, None, ep
    )
    assert_code(bad, DatInvalidHandle, Sub.INVALID_HANDLE_SRQ)
    assert _ep(owner).query()["srq"] == owner.srq.handle, "DAT_EP_PARAM srq_handle"


def test_an_srq_is_a_handle_of_its_ia(owner: Owner) -> None:
    """dat_get_handle_type says DAT_HANDLE_TYPE_SRQ; a consumer context sticks to it (the
    calls on any handle, dat_get_handle_type(3DAT), dat_set_consumer_context(3DAT))."""
    kind: Ref[HandleType] = Ref()
    assert dat_get_handle_type(owner.srq, kind) == DAT_SUCCESS and kind.value == HandleType.SRQ
    assert dat_set_consumer_context(owner.srq, "mine") == DAT_SUCCESS
    context: Ref[object] = Ref()
    assert dat_get_consumer_context(owner.srq, context) == DAT_SUCCESS
    assert context.value == "mine"
    owner.srq.free()
    assert_code(dat_get_handle_type(owner.srq, kind), DatInvalidHandle, Sub.NO_SUBTYPE)
