"""One-sided means one-sided: the target consumer is stopped while its memory is used."""

from __future__ import annotations

from fabricd.launch import Node
from tests.conftest import StartNode
from tests.integration.flows import one_sided


def test_write_and_read_complete_while_the_target_consumer_is_stopped(
    two_nodes: tuple[Node, Node],
) -> None:
    a, b = two_nodes
    one_sided(a.socket, b.socket, b.address)


def test_the_local_path_is_one_sided_too(start: StartNode) -> None:
    """Both endpoints on one daemon: the connection is a memory copy, no socket."""
    node = start("solo")
    one_sided(node.socket, node.socket, node.address)
    assert "peer 127.0.0.1" not in node.log_text(), "a same-node connection used TCP"
