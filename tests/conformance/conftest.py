"""Fixtures of the conformance modules."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from fabricd.launch import Node, start_node


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, Node]]:
    """Two real fabricd nodes on loopback for the whole module."""
    tmp = tmp_path_factory.mktemp("conformance")
    started: list[Node] = []
    try:
        for name in ("node-a", "node-b"):
            started.append(
                start_node(
                    name,
                    str(tmp / f"{name}.sock"),
                    log_level="info",
                    log_path=str(tmp / f"{name}.log"),
                )
            )
        yield started[0], started[1]
    finally:
        for node in started:
            if node.proc.poll() is None:
                os.kill(node.proc.pid, signal.SIGCONT)
            node.stop()
