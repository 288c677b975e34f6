"""The DAT 2.0 calls this provider declines (client.common.DECLINED: CSP, dat_ep_common_connect,
dat_ep_post_send_with_invalidate, dat_ep_post_rdma_read_to_rmr, dat_cno_fd_create,
dat_cno_trigger, dat_ia_ha_related) answer DAT_MODEL_NOT_SUPPORTED alike in the blocking API,
the asyncio API and the flat layer, and change nothing: the IA and its objects serve on (the C
provider answers the same, provider/tests/rest_calls.c)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from client.aio import AsyncIa
from client.api import Ia
from client.common import DECLINED
from client.dat import (
    Ref,
    dat_cno_fd_create,
    dat_cno_trigger,
    dat_csp_create,
    dat_csp_free,
    dat_csp_query,
    dat_ep_common_connect,
    dat_ep_post_rdma_read_to_rmr,
    dat_ep_post_send_with_invalidate,
    dat_ia_ha_related,
)
from fabricd.launch import Node
from proto.errors import DatModelNotSupported
from tests.conformance.support import Sub, assert_code, refused

Blocking = Callable[[Ia, Any, Any, Any], Any]

BLOCKING: dict[str, Blocking] = {
    "dat_csp_create": lambda ia, ep, cno, n: ia.csp_create(None, n, None),
    "dat_csp_query": lambda ia, ep, cno, n: ia.csp_query(None),
    "dat_csp_free": lambda ia, ep, cno, n: ia.csp_free(None),
    "dat_ep_common_connect": lambda ia, ep, cno, n: ep.common_connect(n, 1000, b""),
    "dat_ep_post_send_with_invalidate": lambda ia, ep, cno, n: ep.post_send_with_invalidate(),
    "dat_ep_post_rdma_read_to_rmr": lambda ia, ep, cno, n: ep.post_rdma_read_to_rmr(),
    "dat_cno_fd_create": lambda ia, ep, cno, n: ia.cno_fd_create(),
    "dat_cno_trigger": lambda ia, ep, cno, n: cno.trigger(),
    "dat_ia_ha_related": lambda ia, ep, cno, n: ia.ha_related("df"),
}
FLAT: dict[str, Blocking] = {
    "dat_csp_create": lambda ia, ep, cno, n: dat_csp_create(ia, None, n, None, Ref()),
    "dat_csp_query": lambda ia, ep, cno, n: dat_csp_query(None, 0, Ref()),
    "dat_csp_free": lambda ia, ep, cno, n: dat_csp_free(None),
    "dat_ep_common_connect": lambda ia, ep, cno, n: dat_ep_common_connect(ep, n, 1000, 0, None),
    "dat_ep_post_send_with_invalidate": lambda ia, ep, cno, n: dat_ep_post_send_with_invalidate(
        ep, 0, None, 0, 0, True, 0
    ),
    "dat_ep_post_rdma_read_to_rmr": lambda ia, ep, cno, n: dat_ep_post_rdma_read_to_rmr(
        ep, [0, 0, 0], 0, [0, 0, 0], 0
    ),
    "dat_cno_fd_create": lambda ia, ep, cno, n: dat_cno_fd_create(ia, Ref(), Ref()),
    "dat_cno_trigger": lambda ia, ep, cno, n: dat_cno_trigger(cno, Ref()),
    "dat_ia_ha_related": lambda ia, ep, cno, n: dat_ia_ha_related(ia, "df", Ref()),
}


@pytest.fixture
def node(nodes: tuple[Node, Node]) -> Node:
    return nodes[0]


def test_every_declined_call_has_its_cases() -> None:
    """client.common.DECLINED is what the cases below call: a call declined later gets none
    until it is added here."""
    assert set(BLOCKING) == set(FLAT) == set(DECLINED)


@pytest.mark.parametrize("call", sorted(BLOCKING))
def test_the_blocking_api_and_the_flat_layer_decline(node: Node, call: str) -> None:
    with Ia(node.socket) as ia:
        pz, evd, cno = ia.pz_create(), ia.evd_create(4), ia.cno_create()
        ep = ia.ep_create(pz, evd, evd, evd)
        with refused(DatModelNotSupported, Sub.NO_SUBTYPE) as err:
            BLOCKING[call](ia, ep, cno, node.address)
        assert call in str(err.value)
        assert_code(FLAT[call](ia, ep, cno, node.address), DatModelNotSupported, Sub.NO_SUBTYPE)
        assert ia.pz_create() and ep.get_status()[0] == 0, "the IA serves on"


def test_the_asyncio_api_declines(node: Node) -> None:
    async def main() -> None:
        async with await AsyncIa.open(node.socket) as ia:
            pz = await ia.pz_create()
            evd = await ia.evd_create(4)
            ep = await ia.ep_create(pz, evd, evd, evd)
            cno = ia.cno_create()
            calls: list[Callable[[], Any]] = [
                lambda: ia.csp_create(None, node.address, evd),
                lambda: ia.csp_query(None),
                lambda: ia.csp_free(None),
                lambda: ia.cno_fd_create(),
                lambda: ia.ha_related("df"),
                lambda: ep.common_connect(node.address, 1000, b""),
                lambda: ep.post_send_with_invalidate(),
                lambda: ep.post_rdma_read_to_rmr(),
                lambda: cno.trigger(),
            ]
            for call in calls:
                with refused(DatModelNotSupported, Sub.NO_SUBTYPE):
                    call()
            assert await ia.pz_create()

    asyncio.run(main())
