"""dat_ep_modify (DAT_REFERENCE.md section 4b): what may change, and when."""

from __future__ import annotations

from client.api import Ia
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.constants import EpState
from proto.errors import DatInsufficientResources, DatInvalidHandle, DatInvalidState
from tests.conformance.support import Sub, refused
from tests.integration.flows import connect_pair


def test_evds_and_attributes_change_before_connecting(two_nodes: tuple[Node, Node]) -> None:
    a, _ = two_nodes
    with Ia(a.socket) as ia:
        ep = ia.ep_create(ia.pz_create(), None, None, None)
        evd = ia.evd_create(8)
        ep.modify(recv_evd=evd, request_evd=evd, connect_evd=evd, attr=EpAttr(max_recv_dtos=2))
        assert ep.attr.max_recv_dtos == 2
        ep.post_recv([], 1)
        ep.post_recv([], 2)
        with refused(DatInsufficientResources, Sub.RESOURCE_TEP):
            ep.post_recv([], 3)  # the new queue depth is in force
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_EVD_CONN):
            ep.modify(connect_evd=type(evd)(ia, 99_999))


def test_an_ep_without_pz_or_connect_evd_is_not_ready(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    with Ia(a.socket) as ia:
        ep = ia.ep_create(ia.pz_create(), None, None, None)
        with refused(DatInvalidState, Sub.INVALID_STATE_EP_NOTREADY):
            ep.connect(b.address, 1, 1_000_000)


def test_the_pz_changes_only_when_unconnected(two_nodes: tuple[Node, Node]) -> None:
    a, _ = two_nodes
    with Ia(a.socket) as ia:
        evd = ia.evd_create(8)
        ep = ia.ep_create(ia.pz_create(), evd, evd, evd)
        ep.modify(pz=ia.pz_create())
        ia.rsp_create(5, ep, evd)
        assert ep.state == EpState.RESERVED
        with refused(DatInvalidState, Sub.INVALID_STATE_EP_RESERVED):
            ep.modify(pz=ia.pz_create())
        ep.modify(recv_evd=evd)  # EVDs still may change in RESERVED


def test_nothing_changes_once_connected(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    pair = connect_pair(a.socket, b.socket, b.address)
    try:
        with refused(DatInvalidState, Sub.INVALID_STATE_EP_CONNECTED):
            pair.ep_a.modify(recv_evd=pair.evd_a)
    finally:
        pair.close()
