"""The connection calls beside connect/accept/reject, against real daemons: dat_cr_handoff (the
request reaches another listener of the node, the CR is gone for its caller), dat_ep_dup_connect,
dat_psp_create_any with dat_psp_query and dat_rsp_query, dat_ep_recv_query,
dat_ep_set_watermark, dat_rmr_create_for_ep (an RMR usable only through the EP it is bound to),
and dat_ep_modify in the flat layer."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

from client.aio import AsyncIa
from client.api import Ep, Ia, Psp
from client.dat import (
    Ref,
    dat_cr_handoff,
    dat_ep_dup_connect,
    dat_ep_modify,
    dat_ep_recv_query,
    dat_psp_create_any,
    dat_psp_query,
    dat_rsp_query,
)
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.constants import (
    DAT_SUCCESS,
    DtoCompletionStatus,
    EpAsyncErrorReason,
    EpParamMask,
    EpState,
    EvdFlags,
    MemPriv,
    PspFlags,
    Qos,
    RmrScope,
)
from proto.errors import DatInvalidHandle, DatInvalidParameter
from tests.conformance.support import (
    QUALS,
    WAIT_US,
    E,
    Side,
    Sub,
    _connect,
    _side,
    completion,
    connected,
    refused,
)
from tests.integration.flows import wait_event

Nodes = tuple[Node, Node]
RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE


def _ep(s: Side) -> Ep:
    return s.ia.ep_create(s.pz, s.recv_evd, s.request_evd, s.connect_evd)


def test_a_handed_off_request_reaches_the_other_listener(nodes: Nodes) -> None:
    """To another PSP of the same IA, then to another IA of the node: each time a new CR with
    the active side's private data; the old one is gone; the last holder accepts."""
    a_node, b_node = nodes
    with ExitStack() as stack:
        a = _side(stack, a_node)
        b = _side(stack, b_node)
        c = stack.enter_context(Ia(b_node.socket))
        q1, q2, q3 = next(QUALS), next(QUALS), next(QUALS)
        b.ia.psp_create(q1, b.connect_evd)
        other_evd = b.ia.evd_create(8)
        b.ia.psp_create(q2, other_evd)
        c_evd = c.evd_create(8)
        c.psp_create(q3, c_evd)
        a.ep.connect(b_node.address, q1, WAIT_US, b"who")
        first = wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT).cr_handle
        first.handoff(q2)
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_CR):
            first.query()
        second = wait_event(other_evd, E.CONNECTION_REQUEST_EVENT)
        assert (second.conn_qual, second.private_data) == (q2, b"who")
        assert dat_cr_handoff(second.cr_handle, q3) == DAT_SUCCESS
        third = wait_event(c_evd, E.CONNECTION_REQUEST_EVENT)
        assert third.conn_qual == q3 and third.cr_handle.query().private_data == b"who"
        with refused(DatInvalidParameter, Sub.INVALID_ARG2):
            third.cr_handle.handoff(next(QUALS))  # nobody listens there
        pz = c.pz_create()
        evd = c.evd_create(8)
        ep = c.ep_create(pz, evd, evd, evd)
        third.cr_handle.accept(ep)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_ESTABLISHED)
        wait_event(evd, E.CONNECTION_EVENT_ESTABLISHED)
        assert ep.state == EpState.CONNECTED


def test_dup_connect_connects_to_where_the_connected_ep_did(nodes: Nodes) -> None:
    with ExitStack() as stack:
        a, b = _side(stack, nodes[0]), _side(stack, nodes[1])
        qual = next(QUALS)
        b.ia.psp_create(qual, b.connect_evd)
        a.ep.connect(nodes[1].address, qual, WAIT_US)
        wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT).cr_handle.accept(b.ep)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_ESTABLISHED)
        wait_event(b.connect_evd, E.CONNECTION_EVENT_ESTABLISHED)
        again = a.ia.ep_create(a.pz, a.recv_evd, a.request_evd, a.connect_evd)
        again.dup_connect(a.ep, WAIT_US, b"dup")
        request = wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT)
        assert (request.conn_qual, request.private_data) == (qual, b"dup")
        request.cr_handle.reject()
        wait_event(a.connect_evd, E.CONNECTION_EVENT_PEER_REJECTED)
        assert dat_ep_dup_connect(_ep(a), a.ep, WAIT_US, 0, None, Qos.BEST_EFFORT) == DAT_SUCCESS
        wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT).cr_handle.reject()

        async def main() -> None:
            async with await AsyncIa.open(nodes[0].socket) as aia:
                pz = await aia.pz_create()
                evd = await aia.evd_create(8)
                first = await aia.ep_create(pz, evd, evd, evd)
                await first.connect(nodes[1].address, qual, WAIT_US)
                apart = b.ia.evd_create(8)  # the accepted EP's events, apart from requests
                accepting = b.ia.ep_create(b.pz, apart, apart, apart)
                wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT).cr_handle.accept(accepting)
                assert (await evd.wait(WAIT_US))[0].event_number == E.CONNECTION_EVENT_ESTABLISHED
                second = await aia.ep_create(pz, evd, evd, evd)
                await second.dup_connect(first, WAIT_US)
                assert wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT).conn_qual == qual

        asyncio.run(main())


def test_psp_create_any_and_the_service_point_queries(nodes: Nodes) -> None:
    with ExitStack() as stack:
        a, b = _side(stack, nodes[0]), _side(stack, nodes[1])
        psp, qual = b.ia.psp_create_any(b.connect_evd, PspFlags.PROVIDER)
        assert 0x8000 <= qual <= 0xFFFF
        param = psp.query()
        assert (param["ia"], param["conn_qual"], param["psp_flags"]) == (b.ia, qual, 1)
        assert param["evd"].handle == b.connect_evd.handle
        flat_psp, flat_qual = Ref[Psp](), Ref[int]()
        assert dat_psp_create_any(b.ia, flat_qual, b.connect_evd, 0, flat_psp) == DAT_SUCCESS
        assert flat_qual.value not in (None, qual)
        got = Ref[dict[str, object]]()
        assert flat_psp.value is not None
        assert dat_psp_query(flat_psp.value, 0, got) == DAT_SUCCESS and got.value is not None
        assert got.value["conn_qual"] == flat_qual.value
        a.ep.connect(nodes[1].address, qual, WAIT_US)  # the conn_qual it picked is reachable
        request = wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT)
        assert request.conn_qual == qual and request.ep
        rsp_ep = _ep(b)
        rsp_qual = next(QUALS)
        rsp = b.ia.rsp_create(rsp_qual, rsp_ep, b.connect_evd)
        rparam = rsp.query()
        assert rparam["conn_qual"] == rsp_qual and rparam["ep"].handle == rsp_ep.handle
        assert dat_rsp_query(rsp, 0, got) == DAT_SUCCESS and got.value["conn_qual"] == rsp_qual
        psp.free()
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_PSP):
            psp.query()


def test_recv_query_and_the_soft_watermark(nodes: Nodes) -> None:
    with connected(*nodes) as (a, b):
        assert b.ep.recv_query() == (0, 0)
        b.ep.set_watermark(1, -1)
        for cookie in (1, 2):
            b.ep.post_recv([b.lmr.triplet(64 * cookie, 64)], cookie)
        event = wait_event(b.ia.async_evd, E.ASYNC_ERROR_EP_BROKEN)
        assert (event.handle, event.reason) == (
            b.ep.handle,
            EpAsyncErrorReason.SRQ_SOFT_HIGH_WATERMARK_EVENT,
        )
        nbufs, span = Ref[int](), Ref[int]()
        assert dat_ep_recv_query(b.ep, nbufs, span) == DAT_SUCCESS
        assert (nbufs.value, span.value) == (2, 2)
        a.ep.post_send([a.lmr.triplet(0, 8)], 9)
        assert completion(b.recv_evd).cookie == 1
        assert b.ep.recv_query() == (1, 1), "a completed receive is no longer allocated"
        assert b.ep.state == EpState.CONNECTED


def test_an_ep_scope_rmr_is_usable_only_through_its_ep(nodes: Nodes) -> None:
    with ExitStack() as stack:
        a, b = _side(stack, nodes[0]), _side(stack, nodes[1])
        _connect(a, b, nodes[1])
        c = _side(stack, nodes[0])
        b2 = _side(stack, nodes[1])
        _connect(c, b2, nodes[1])
        window = b.ia.rmr_create_for_ep(b.pz)
        assert window.query()["rmr_scope"] == RmrScope.EP
        assert b.ia.rmr_create(b.pz).query()["rmr_scope"] == RmrScope.PZ
        key = window.bind(b.lmr, b.lmr.triplet(0, 64), RW, b.ep)
        wait_event(b.request_evd, E.RMR_BIND_COMPLETION_EVENT)
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 1, [b.lmr.registered_address, 8, key])
        assert completion(a.request_evd).status == DtoCompletionStatus.DTO_SUCCESS
        # b2 is another IA, so its EP cannot be bound; the key is tried through c's connection
        c.ep.post_rdma_write([c.lmr.triplet(0, 8)], 2, [b.lmr.registered_address, 8, key])
        assert completion(c.request_evd).status == DtoCompletionStatus.DTO_ERR_REMOTE_ACCESS


def test_flat_ep_modify_changes_the_named_fields(nodes: Nodes) -> None:
    with Ia(nodes[0].socket) as ia:
        pz, other = ia.pz_create(), ia.pz_create()
        evd, evd2 = ia.evd_create(8), ia.evd_create(8, EvdFlags.DEFAULT)
        ep = ia.ep_create(pz, evd, evd, evd)
        mask = EpParamMask.PZ_HANDLE | EpParamMask.CONNECT_EVD_HANDLE | EpParamMask.EP_ATTR_ALL
        attr = EpAttr(max_recv_dtos=32)
        param = {"pz": other, "connect_evd": evd2, "ep_attr": attr}
        assert dat_ep_modify(ep, mask, param) == DAT_SUCCESS
        got = ep.query()
        assert (got["pz"], got["connect_evd"]) == (other.handle, evd2.handle)
        assert got["recv_evd"] == evd.handle and got["ep_attr"].max_recv_dtos == 32
