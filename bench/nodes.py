"""The fabric a benchmark runs on: where its initiator and target consumers attach, either
daemons this run starts on loopback or running nodes it is given."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from fabricd.launch import Node, start_node


@dataclass
class Fabric:
    """Where the initiator and target consumers attach."""

    initiator: str
    target: str
    target_address: tuple[str, int]
    daemons: tuple[int, int] | None = None  # pids, when this run started them


@contextmanager
def local_fabric(same_node: bool) -> Iterator[Fabric]:
    """Start one or two fabricd nodes on loopback for the run."""
    with tempfile.TemporaryDirectory(prefix="datfabric-bench-") as tmp:
        nodes: list[Node] = []
        try:
            nodes.append(start_node("bench-a", os.path.join(tmp, "a.sock")))
            if not same_node:
                nodes.append(start_node("bench-b", os.path.join(tmp, "b.sock")))
            a, b = nodes[0], nodes[-1]
            yield Fabric(a.socket, b.socket, b.address, (a.proc.pid, b.proc.pid))
        finally:
            for node in nodes:
                node.stop()


@contextmanager
def given_fabric(initiator: str, target: str, address: str) -> Iterator[Fabric]:
    """Running nodes: the initiator's and target's sockets, the target node's HOST:PORT."""
    host, _, port = address.rpartition(":")
    yield Fabric(initiator, target, (host, int(port)))


def fabric_for(args: Any) -> AbstractContextManager[Fabric]:
    """The fabric ``fabricctl bench`` arguments name: running nodes (--initiator, --target,
    --target-address) or two (--same-node: one) started here."""
    if args.initiator:
        return given_fabric(args.initiator, args.target, args.target_address)
    return local_fabric(args.same_node)
