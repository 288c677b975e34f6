"""The calls on any handle, and the queries the Python APIs gained, against real daemons:
dat_set_consumer_context / dat_get_consumer_context / dat_get_handle_type for every kind of
handle in the three APIs (a freed or foreign handle is DAT_INVALID_HANDLE), dat_pz_query, and
dat_ia_query's variants (the async EVD alone; the masks choose what is filled; the provider
attributes)."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from typing import Any

import pytest

from client.aio import AsyncIa
from client.api import Ia
from client.dat import (
    Ref,
    dat_get_consumer_context,
    dat_get_handle_type,
    dat_ia_query,
    dat_pz_query,
    dat_set_consumer_context,
)
from fabricd.launch import Node
from proto.constants import (
    DAT_SUCCESS,
    HandleType,
    MemPriv,
    MemType,
    RmrScope,
)
from proto.errors import DatInvalidHandle
from tests.conformance.support import QUALS, WAIT_US, E, Sub, _side, refused
from tests.integration.flows import wait_event

Nodes = tuple[Node, Node]


def _every_handle(ia: Ia, node: Node, stack: ExitStack) -> dict[HandleType, Any]:
    """One live handle of each kind (a CR from a request this IA's node receives)."""
    pz = ia.pz_create()
    evd = ia.evd_create(8)
    ep = ia.ep_create(pz, evd, evd, evd)
    buf = ia.alloc(64)
    lmr = ia.lmr_create(MemType.VIRTUAL, buf, 64, pz, MemPriv.ALL)
    qual = next(QUALS)
    psp = ia.psp_create(qual, evd)
    rsp = ia.rsp_create(next(QUALS), ia.ep_create(pz, evd, evd, evd), evd)
    peer = _side(stack, node)
    peer.ep.connect(node.address, qual, WAIT_US)
    cr = wait_event(evd, E.CONNECTION_REQUEST_EVENT).cr_handle
    return {
        HandleType.IA: ia,
        HandleType.PZ: pz,
        HandleType.EVD: evd,
        HandleType.EP: ep,
        HandleType.LMR: lmr,
        HandleType.RMR: ia.rmr_create(pz),
        HandleType.PSP: psp,
        HandleType.RSP: rsp,
        HandleType.CNO: ia.cno_create(),
        HandleType.CR: cr,
    }


def test_contexts_and_types_of_every_kind_of_handle(nodes: Nodes) -> None:
    with ExitStack() as stack:
        ia = stack.enter_context(Ia(nodes[0].socket))
        handles = _every_handle(ia, nodes[0], stack)
        for kind, handle in handles.items():
            assert ia.get_handle_type(handle) == kind
            assert ia.get_consumer_context(handle) is None, "nothing set yet"
            ia.set_consumer_context(handle, ("ctx", kind))
        for kind, handle in handles.items():
            assert ia.get_consumer_context(handle) == ("ctx", kind)
            got, kind_ref = Ref[Any](), Ref[HandleType]()
            assert dat_get_consumer_context(handle, got) == DAT_SUCCESS
            assert got.value == ("ctx", kind)
            assert dat_get_handle_type(handle, kind_ref) == DAT_SUCCESS and kind_ref.value == kind
            assert dat_set_consumer_context(handle, 7) == DAT_SUCCESS
            assert ia.get_consumer_context(handle) == 7
        cno = handles[HandleType.CNO]
        cno.free()
        with refused(DatInvalidHandle, Sub.NO_SUBTYPE):
            ia.get_consumer_context(cno)
        other = stack.enter_context(Ia(nodes[0].socket))
        with refused(DatInvalidHandle, Sub.NO_SUBTYPE):
            other.set_consumer_context(handles[HandleType.EP], 1)  # another IA's handle


def test_contexts_and_types_in_the_asyncio_api(nodes: Nodes) -> None:
    async def main() -> None:
        async with await AsyncIa.open(nodes[0].socket) as ia:
            pz = await ia.pz_create()
            evd = await ia.evd_create(8)
            ep = await ia.ep_create(pz, evd, evd, evd)
            buf = ia.alloc(64)
            lmr = await ia.lmr_create(MemType.VIRTUAL, buf, 64, pz, MemPriv.ALL)
            psp = await ia.psp_create(next(QUALS), evd)
            handles: dict[HandleType, Any] = {
                HandleType.IA: ia,
                HandleType.PZ: pz,
                HandleType.EVD: evd,
                HandleType.EP: ep,
                HandleType.LMR: lmr,
                HandleType.RMR: await ia.rmr_create_for_ep(pz),
                HandleType.PSP: psp,
                HandleType.CNO: ia.cno_create(),
            }
            for kind, handle in handles.items():
                assert ia.get_handle_type(handle) == kind
                ia.set_consumer_context(handle, kind.name)
            for kind, handle in handles.items():
                assert ia.get_consumer_context(handle) == kind.name
            assert handles[HandleType.RMR].query()["rmr_scope"] == RmrScope.EP
            assert ia.pz_query(pz) == {"ia": ia}
            assert ia.psp_query(psp)["conn_qual"] == psp_conn_qual(ia, psp)
            with refused(DatInvalidHandle, Sub.NO_SUBTYPE):
                ia.get_handle_type(int(pz))  # a bare number names no kind of handle

    asyncio.run(main())


def psp_conn_qual(ia: AsyncIa, psp: int) -> int:
    """The conn_qual the core recorded for ``psp`` (what dat_psp_query reports)."""
    return ia.core.sps[psp].conn_qual


def test_pz_query(nodes: Nodes) -> None:
    with Ia(nodes[0].socket) as ia:
        pz = ia.pz_create()
        assert pz.query() == {"ia": ia}
        got = Ref[dict[str, Any]]()
        assert dat_pz_query(pz, 0, got) == DAT_SUCCESS and got.value == {"ia": ia}
        pz.free()
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_PZ):
            pz.query()


@pytest.mark.parametrize("outs", [(False, False), (True, False), (False, True), (True, True)])
def test_ia_query_fills_the_out_parameters_given(nodes: Nodes, outs: tuple[bool, bool]) -> None:
    """Whatever the masks: the spec lets a provider return more than they ask for."""
    with Ia(nodes[0].socket) as ia:
        async_evd = Ref[Any]()
        ia_attr = Ref[dict[str, Any]]() if outs[0] else None
        pr_attr = Ref[dict[str, Any]]() if outs[1] else None
        masks = (int(outs[0]), int(outs[1]))
        assert dat_ia_query(ia, async_evd, masks[0], ia_attr, masks[1], pr_attr) == DAT_SUCCESS
        assert async_evd.value is ia.async_evd
        assert dat_ia_query(ia, None, 0, ia_attr, 0, pr_attr) == DAT_SUCCESS
        if ia_attr is not None:
            assert ia_attr.value is not None and ia_attr.value["max_evd_qlen"] > 0
        if pr_attr is not None:
            pr = pr_attr.value
            assert pr is not None
            assert pr["provider_name"] == ia.name
            assert pr["ep_recv_info_supported"] is True
            assert pr["rmr_scope_supported"] == RmrScope.ANY
            assert pr["ha_supported"] is False and pr["max_private_data_size"] > 0
        assert dat_ia_query(ia, None, 0, None, 0, None) == DAT_SUCCESS, "nothing asked"
        assert ia.query()["rmr_scope_supported"] == RmrScope.ANY
        assert ia.query()["provider_name"] == ia.name, "the blocking API says what the flat does"
