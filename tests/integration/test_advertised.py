"""The address a node gives (dat_ia_query's ia_address, what C programs such as dtest hand to
their peer) names a host a peer can reach, also for a node listening on every interface."""

from __future__ import annotations

import pytest

from client.api import Ia
from client.core import parse_address
from fabricd.launch import free_port
from fabricd.server import advertised
from tests.conftest import StartNode
from tests.integration.flows import connect_pair


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::"])
def test_a_wildcard_is_never_given_as_the_address(host: str) -> None:
    assert advertised(host) not in ("", "0.0.0.0", "::")


def test_a_named_host_is_given_as_it_is() -> None:
    assert advertised("127.0.0.2") == "127.0.0.2"


def test_a_node_on_every_interface_reports_an_address_its_peers_connect_to(
    start: StartNode,
) -> None:
    wide = start("wide", host="0.0.0.0", port=free_port("0.0.0.0"))
    narrow = start("narrow")
    with Ia(wide.socket) as ia:
        given = ia.query()["ia_address"]
    assert given == f"{advertised('0.0.0.0')}:{wide.port}"
    with Ia(narrow.socket) as ia:
        assert ia.query()["ia_address"] == "{}:{}".format(*narrow.address)
    pair = connect_pair(narrow.socket, wide.socket, parse_address(given))  # what a peer is told
    pair.close()
