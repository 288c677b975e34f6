"""Fixtures: real fabricd processes on loopback, each with its own socket and log."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, TypedDict, Unpack

import pytest

from fabricd.launch import Node, start_node


class NodeOptions(TypedDict, total=False):
    """What a test may pass on to start_node (the fixture chooses the log level and path)."""

    host: str
    port: int
    netns: str | None
    extra: list[str] | None
    timeout: float
    cluster_key: str | None


class StartNode(Protocol):
    """The ``start`` fixture: start a named node, stopped after the test."""

    def __call__(self, name: str, **kw: Unpack[NodeOptions]) -> Node: ...


@pytest.fixture
def start(tmp_path: Path) -> Iterator[StartNode]:
    """Start fabricd nodes for one test; all are stopped (even if SIGSTOPped) afterwards."""
    nodes: list[Node] = []

    def _start(name: str, **kw: Unpack[NodeOptions]) -> Node:
        node = start_node(
            name,
            str(tmp_path / f"{name}.sock"),
            log_level="info",
            log_path=str(tmp_path / f"{name}.log"),
            **kw,
        )
        nodes.append(node)
        return node

    yield _start
    for node in nodes:
        if node.proc.poll() is None:
            os.kill(node.proc.pid, signal.SIGCONT)
        node.stop()


@pytest.fixture
def two_nodes(start: StartNode) -> tuple[Node, Node]:
    """Two nodes on loopback."""
    return start("node-a"), start("node-b")
