"""dat_ib_post_fetch_and_add, dat_ib_post_cmp_and_swap and dat_ib_post_rdma_write_immed
(dat_ib_extensions.h) through the flat layer against two real daemons: the state and queue
rules every request post follows, the handle check, and the completions' extension data. (The
argument errors are tests/core/test_ib_extensions.py's and tests/integration's.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from client.api import Ep
from client.dat import (
    dat_ib_post_cmp_and_swap,
    dat_ib_post_fetch_and_add,
    dat_ib_post_rdma_write_immed,
)
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.constants import DAT_SUCCESS, DtoCompletionStatus, EpState, IbExtType, MemPriv, MemType
from proto.errors import DatInsufficientResources, DatInvalidHandle, DatInvalidState
from tests.conformance.support import (
    EP_STATE_SUBTYPE,
    WAIT_US,
    E,
    Side,
    Sub,
    assert_code,
    connected,
    paused,
)

Post = Callable[[Ep, Side, Side, int], int]


def _fetch_add(ep: Ep, a: Side, b: Side, cookie: int) -> int:
    return dat_ib_post_fetch_and_add(ep, 1, a.lmr.triplet(0, 8), cookie, b.lmr.remote(0, 8), 0)


def _cmp_swap(ep: Ep, a: Side, b: Side, cookie: int) -> int:
    local, remote = a.lmr.triplet(0, 8), b.lmr.remote(0, 8)
    return dat_ib_post_cmp_and_swap(ep, 0, 1, local, cookie, remote, 0)


def _write_immed(ep: Ep, a: Side, b: Side, cookie: int) -> int:
    return dat_ib_post_rdma_write_immed(
        ep, 1, [a.lmr.triplet(0, 8)], cookie, b.lmr.remote(0, 8), 7, 0
    )


POSTS = pytest.mark.parametrize(
    "post", [_fetch_add, _cmp_swap, _write_immed], ids=["fetch_add", "cmp_swap", "write_immed"]
)


@POSTS
def test_a_post_on_an_unconnected_ep_is_invalid_state(nodes: tuple[Node, Node], post: Post) -> None:
    with connected(*nodes) as (a, b):
        fresh = a.ia.ep_create(a.pz, a.recv_evd, a.request_evd, a.connect_evd)
        ret = post(fresh, a, b, 1)
        assert_code(ret, DatInvalidState, EP_STATE_SUBTYPE[EpState.UNCONNECTED])


@POSTS
def test_a_post_that_is_not_on_an_ep_is_an_invalid_handle(
    nodes: tuple[Node, Node], post: Post
) -> None:
    with connected(*nodes) as (a, b):
        not_ep: Ep = a.pz  # type: ignore[assignment]
        assert_code(post(not_ep, a, b, 1), DatInvalidHandle, Sub.INVALID_HANDLE_EP)


@POSTS
def test_a_full_request_queue_is_insufficient_resources(
    nodes: tuple[Node, Node], post: Post
) -> None:
    """With the target daemon paused nothing completes: the third post finds the EP's
    max_request_dtos of 2 outstanding."""
    with connected(*nodes, attr_a=EpAttr(max_request_dtos=2)) as (a, b), paused(nodes[1]):
        assert [post(a.ep, a, b, cookie) for cookie in range(2)] == [DAT_SUCCESS] * 2
        assert_code(post(a.ep, a, b, 3), DatInsufficientResources, Sub.RESOURCE_TEP)


@pytest.mark.parametrize(
    ("post", "ext_type"),
    [
        (_fetch_add, IbExtType.FETCH_AND_ADD),
        (_cmp_swap, IbExtType.CMP_AND_SWAP),
        (_write_immed, IbExtType.RDMA_WRITE_IMMED),
    ],
    ids=["fetch_add", "cmp_swap", "write_immed"],
)
def test_the_completion_carries_the_extension_type(
    nodes: tuple[Node, Node], post: Post, ext_type: IbExtType
) -> None:
    with connected(*nodes) as (a, b):
        b.ep.post_recv([b.lmr.triplet(1024, 0)], 1)
        size = b.lmr.registered_size
        b.lmr = b.ia.lmr_create(
            MemType.VIRTUAL, b.buf, size, b.pz, MemPriv.ALL | MemPriv.REMOTE_ATOMIC
        )
        assert post(a.ep, a, b, 5) == DAT_SUCCESS
        done, _ = a.request_evd.wait(WAIT_US)
        assert (done.event_number, done.cookie, done.ext_type) == (E.IB_DTO_EVENT, 5, ext_type)
        assert done.status == DtoCompletionStatus.DTO_SUCCESS
