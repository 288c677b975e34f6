"""The two-node flows across two hosts: network namespaces joined by a veth pair."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fabricd.launch import Node
from proto.constants import EventNumber
from tests.conftest import StartNode
from tests.integration.flows import connect_pair, one_sided, wait_event
from tests.integration.netns import Hosts, two_hosts, unavailable

pytestmark = pytest.mark.netns
WHY = unavailable()


@pytest.fixture
def hosts(start: StartNode) -> Iterator[tuple[Hosts, Node, Node]]:
    if WHY:
        pytest.skip(WHY)
    with two_hosts() as h:
        a = start("host-a", host=h.addr[0], port=7471, netns=h.ns[0])
        b = start("host-b", host=h.addr[1], port=7471, netns=h.ns[1])
        yield h, a, b
        for node in (a, b):
            node.stop()


def test_one_sided_across_namespaces(hosts: tuple[Hosts, Node, Node]) -> None:
    _, a, b = hosts
    assert b.address == (hosts[0].addr[1], 7471)
    one_sided(a.socket, b.socket, b.address)


def test_send_and_write_across_namespaces(hosts: tuple[Hosts, Node, Node]) -> None:
    _, a, b = hosts
    pair = connect_pair(a.socket, b.socket, b.address)
    try:
        pair.view_a[:11] = b"across veth"
        pair.ep_b.post_recv([pair.lmr_b.triplet(100, 64)], cookie=5)
        pair.ep_a.post_send([pair.lmr_a.triplet(0, 11)], cookie=6)
        got = wait_event(pair.evd_b, EventNumber.DTO_COMPLETION_EVENT)
        assert (got.cookie, got.transfered_length) == (5, 11)
        assert bytes(pair.view_b[100:111]) == b"across veth"
        assert wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT).cookie == 6
    finally:
        pair.close()
