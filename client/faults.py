"""Fault injection from the consumer side: rules on the daemons of a fabric, by node name.

A rule fires on messages a node sends, so it is installed on its ``src`` node (on every node
when it names none). Calls return once the daemons hold the rules: a rule added before a block
of code is in force for the block's first message.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from client.api import Ia
from proto.frames import admin_socket

_names = itertools.count(1)


def parse_nodes(text: str) -> dict[str, str]:
    """``name=socket,name=socket`` (as DATFABRIC_NODES holds it) to a mapping."""
    nodes = {}
    for item in filter(None, text.split(",")):
        name, _, sock = item.partition("=")
        if not name or not sock:
            raise ValueError(f"{item!r}: a node is name=socket")
        nodes[name] = sock
    return nodes


class Faults:
    """The fault engines of a set of nodes (``{name: daemon socket}``)."""

    def __init__(self, nodes: dict[str, str]) -> None:
        self.nodes = dict(nodes)
        self._ias: dict[str, Ia] = {}

    def _call(self, node: str, method: str, *args: Any) -> list[Any]:
        if node not in self.nodes:
            raise KeyError(f"unknown node {node!r}; known: {sorted(self.nodes)}")
        ia = self._ias.get(node)
        if ia is None or ia.closed:
            ia = self._ias[node] = self._admin(node)
        result: list[Any] = ia.run(ia.core.admin(method, list(args)))
        return result

    def _admin(self, node: str) -> Ia:
        """A connection to the node's admin socket (owner-only; consumers cannot reach it)."""
        return Ia(admin_socket(self.nodes[node]), admin=True)

    def _targets(self, node: str | None) -> list[str]:
        return [node] if node else list(self.nodes)

    def add(
        self, action: str, *, seed: int | None = None, node: str | None = None, **match: Any
    ) -> str:
        """Install a rule (``action`` and the match/parameter fields of proto.faultrules.Rule) on
        its source node; returns its name."""
        rule = {"name": match.pop("name", f"rule-{next(_names)}"), "action": action, **match}
        for target in self._targets(node or match.get("src")):
            self._call(target, "fault_add", [rule], seed)
        return str(rule["name"])

    def install(self, rules: Sequence[dict[str, Any]], seed: int | None = None) -> None:
        """Install ready-made rules (a schedule phase, a replayed log) on their source nodes."""
        for rule in rules:
            for target in self._targets(rule.get("src")):
                self._call(target, "fault_add", [rule], seed)

    def remove(self, name: str, node: str | None = None) -> None:
        """Remove a rule by name wherever it is installed."""
        for target in self._targets(node):
            rules, _ = self._call(target, "fault_list")
            if any(r["name"] == name for r in rules):
                self._call(target, "fault_remove", name)

    def clear(self, node: str | None = None) -> int:
        """Remove every rule; returns how many remain (0, verified by each daemon)."""
        return sum(self._call(target, "fault_clear")[0] for target in self._targets(node))

    def rules(self) -> dict[str, list[dict[str, Any]]]:
        """The rules of each node, with how often each fired."""
        return {name: self._call(name, "fault_list")[0] for name in self.nodes}

    def log(self, node: str | None = None, clear: bool = False) -> list[str]:
        """The fault log (JSON lines) of the nodes, in node order."""
        lines: list[str] = []
        for target in self._targets(node):
            lines += self._call(target, "fault_log", clear)[0]
        return lines

    def partition(
        self, groups: Sequence[Sequence[str]], mode: str = "blackhole", one_way: bool = False
    ) -> None:
        """Cut the links between groups (``[["a", "b"], ["c"]]``); ``one_way``: only from the
        first group to the others. ``mode``: blackhole (silence) or reset."""
        for i, group in enumerate(groups):
            if one_way and i > 0:
                break
            others = [n for j, g in enumerate(groups) if j != i for n in g]
            for src in group:
                for dst in others:
                    self.add(mode, name=f"partition-{src}-{dst}", src=src, dst=dst)

    def heal(self) -> int:
        """Remove every rule on every node (partitions included); returns rules left (0)."""
        return self.clear()

    def revoke(self, node: str, rmr_context: int) -> None:
        """Revoke a remote key on a node: later RDMA with it is a remote access error."""
        self._call(node, "rmr_revoke", rmr_context)

    def status(self, node: str) -> dict[str, Any]:
        """A node's name, address, pid and counts."""
        return dict(self._call(node, "node_status")[0])

    def pause(self, node: str) -> None:
        """Stop a node's daemon (SIGSTOP: same host only)."""
        os.kill(int(self.status(node)["pid"]), signal.SIGSTOP)

    def resume(self, node: str, pid: int | None = None) -> None:
        """Continue a paused node (its pid, as status gave it before the pause)."""
        os.kill(pid or int(self.status(node)["pid"]), signal.SIGCONT)

    def crash(self, node: str) -> None:
        """Kill a node's daemon at once (it says goodbye to nobody)."""
        ia = self._ias.pop(node, None) or self._admin(node)
        _, frame = ia.core.call_frame(next(ia.core.admin("node_crash", [])))
        ia._send(frame)
        ia.close()  # an admin connection has no queues in /dev/shm to leave behind

    @contextmanager
    def rule(self, action: str, *, seed: int | None = None, **match: Any) -> Iterator[str]:
        """For this block: ``with faults.rule("drop", probability=0.1, op="RDMA_WRITE",
        src="n1", dst="n2", seed=7): ...``"""
        name = self.add(action, seed=seed, **match)
        try:
            yield name
        finally:
            self.remove(name)

    def run_schedule(self, schedule: dict[str, Any], stop: threading.Event | None = None) -> None:
        """Phases of faults with durations, then a heal: ``{"seed": 7, "phases": [{"duration":
        2, "rules": [...]}, {"duration": 1, "partition": [["a"], ["b"]]}]}``."""
        seed = schedule.get("seed")
        try:
            for phase in schedule["phases"]:
                self.install(phase.get("rules", []), seed)
                if "partition" in phase:
                    self.partition(phase["partition"], phase.get("mode", "blackhole"))
                if stop is None:
                    time.sleep(float(phase.get("duration", 0)))
                elif stop.wait(float(phase.get("duration", 0))):
                    break  # the workload is over
                self.clear()
        finally:
            self.heal()

    def close(self) -> None:
        """Close the admin connections."""
        for ia in self._ias.values():
            ia.close()
        self._ias.clear()

    def __enter__(self) -> Faults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
