"""The fabric a benchmark runs on: where its initiator and target consumers attach, either
daemons this run starts on loopback or running nodes it is given."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from fabricd.launch import Node, start_node
from fabricd.runtime import cpu_list


@dataclass
class Fabric:
    """Where the initiator and target consumers attach."""

    initiator: str
    target: str
    target_address: tuple[str, int]
    daemons: tuple[int, int] | None = None  # pids, when this run started them


def daemon_cpus(text: str) -> tuple[str, str]:
    """``--daemon-cpus I:T``: the CPU lists (fabricd --cpus) of the initiator's and the
    target's daemon; "" leaves one where the kernel places it."""
    initiator, colon, target = text.partition(":")
    for cpus in (initiator, target):
        if cpus:
            try:
                cpu_list(cpus)
            except ValueError as err:
                raise argparse.ArgumentTypeError(str(err)) from None
    if not colon or not (initiator or target):
        raise argparse.ArgumentTypeError(f"{text!r}: give I:T, such as 1:0")
    return initiator, target


def add_daemon_cpus(parser: argparse.ArgumentParser, whose: str) -> None:
    """The ``--daemon-cpus I:T`` option of a tool that starts an initiator's and a target's
    daemon (``whose``: which daemons, for its help)."""
    parser.add_argument(
        "--daemon-cpus",
        type=daemon_cpus,
        default=("", ""),
        metavar="I:T",
        help=f"pin {whose}: the initiator's to CPU list I, the target's to T (fabricd --cpus),"
        " such as 1:0; default unpinned",
    )


def cpus_args(cpus: str) -> list[str]:
    """fabricd's arguments that pin it to ``cpus`` ("": none)."""
    return ["--cpus", cpus] if cpus else []


@contextmanager
def local_fabric(same_node: bool, cpus: tuple[str, str] = ("", "")) -> Iterator[Fabric]:
    """Start one or two fabricd nodes on loopback for the run (``cpus``: the initiator's and
    the target's daemon's CPU lists; one daemon for both takes the initiator's)."""
    with tempfile.TemporaryDirectory(prefix="datfabric-bench-") as tmp:
        nodes: list[Node] = []
        try:
            nodes.append(
                start_node("bench-a", os.path.join(tmp, "a.sock"), extra=cpus_args(cpus[0]))
            )
            if not same_node:
                nodes.append(
                    start_node("bench-b", os.path.join(tmp, "b.sock"), extra=cpus_args(cpus[1]))
                )
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
    return local_fabric(args.same_node, args.daemon_cpus)
