"""One-sided means one-sided: the target consumer is stopped while its memory is used."""

from __future__ import annotations

from fabricd.launch import Node
from tests.integration.flows import one_sided


def test_write_and_read_complete_while_the_target_consumer_is_stopped(
    two_nodes: tuple[Node, Node],
) -> None:
    a, b = two_nodes
    one_sided(a.socket, b.socket, b.address)
