"""pytest fixtures for programs tested on a datfabric (``pytest_plugins = ["tools.testing"]``).

``fabric`` starts two real nodes, n1 and n2; ``faults`` controls their fault rules, so a test
says in one line: ``with faults.rule("drop", probability=0.1, op="RDMA_WRITE", src="n1",
dst="n2", seed=7): ...``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from client.faults import Faults
from fabricd.launch import Node, start_node


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[dict[str, Node]]:
    """Two fabricd nodes on loopback, by name (each node's .socket and .address)."""
    nodes: dict[str, Node] = {}
    try:
        for name in ("n1", "n2"):
            nodes[name] = start_node(name, str(tmp_path / f"{name}.sock"))
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()


@pytest.fixture
def faults(fabric: dict[str, Node]) -> Iterator[Faults]:
    """The fault rules of ``fabric``; every rule is removed after the test."""
    with Faults({name: node.socket for name, node in fabric.items()}) as control:
        yield control
        control.heal()
