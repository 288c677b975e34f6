"""Fixtures: real fabricd processes on loopback, each with its own socket and log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypedDict, Unpack

import pytest

from fabricd.launch import Node, start_node
from proto import native


def pytest_report_header() -> str:
    reason = native.why_interpreted()
    return "native modules: " + ("compiled" if reason is None else f"interpreted ({reason})")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``interpreted`` patches the core's functions, which compiled callers
    would not see: with the native build in use, it runs in a pytest of its own whose NATIVE
    modules load from their sources (proto.native)."""
    if native.why_interpreted() is not None:
        return
    for item in items:
        if item.get_closest_marker("interpreted") and isinstance(item, pytest.Function):
            item.runtest = _interpreted(item.nodeid, item.config.rootpath)  # type: ignore[method-assign]


def _interpreted(nodeid: str, root: Path) -> Callable[[], None]:
    def run() -> None:
        env = {**os.environ, native.ENV: "1"}
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", nodeid]
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"interpreted: {done.stdout[-3000:]}{done.stderr[-2000:]}"

    return run


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
