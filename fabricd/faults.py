"""Fault rules: which outgoing peer messages a fault hits, decided reproducibly.

A decision is a function of (seed, rule name, directed link, connection, message number) only,
never of the clock, so the same seed, rules and workload fire the same faults; every firing is
one JSON line of the fault log (no timestamps: two runs give the same log byte for byte). The
rules themselves (``Rule``, ``ACTIONS``, ``OPS``, ``replay_rules``) are proto.faultrules.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from statistics import NormalDist

from proto.faultrules import Rule


@dataclass(frozen=True)
class Message:
    """What the engine knows of one outgoing peer message."""

    src: str
    dst: str
    connection: int
    number: int  # per link, from 1
    op: str
    size: int
    rmr_context: int | None
    seq: int | None


def chance(seed: int, rule: str, src: str, dst: str, connection: int, number: int) -> float:
    """A uniform number in [0, 1) determined by its arguments alone."""
    key = f"{seed}|{rule}|{src}>{dst}|{connection}|{number}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64


class FaultEngine:
    """The rules of one daemon, their decisions and the fault log."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rules: dict[str, Rule] = {}
        self.log: list[str] = []
        self.active = False
        """Are there rules at all (the data path skips the engine when not)? A word kept by
        add, remove and clear, the rules' only writers: the data path reads it ~3 times a
        request, and a property is a Python call each time."""

    def add(self, rule: Rule, now: float = 0.0) -> None:
        """Install a rule (replacing one of the same name); its time window starts ``now``."""
        rule.validate()
        rule.installed = now
        self.rules[rule.name] = rule
        self.active = True

    def remove(self, name: str) -> bool:
        """Remove a rule; False when there was none of that name."""
        removed = self.rules.pop(name, None) is not None
        self.active = bool(self.rules)
        return removed

    def clear(self) -> None:
        """Remove every rule."""
        self.rules.clear()
        self.active = False

    def decide(self, msg: Message, now: float = 0.0) -> Rule | None:
        """The first rule that fires on ``msg``, or None (the caller logs it with details).
        Only a rule's time window looks at ``now``; every other choice is reproducible."""
        for rule in self.rules.values():
            if not self._matches(rule, msg):
                continue
            age = now - rule.installed
            if age < rule.start_s or (rule.end_s is not None and age > rule.end_s):
                continue
            rule.seen += 1
            if rule.nth is not None and rule.seen != rule.nth:
                continue
            if rule.count is not None and rule.fired >= rule.count:
                continue
            if (
                rule.probability < 1.0
                and chance(self.seed, rule.name, msg.src, msg.dst, msg.connection, msg.number)
                >= rule.probability
            ):
                continue
            rule.fired += 1
            return rule
        return None

    @staticmethod
    def _matches(rule: Rule, msg: Message) -> bool:
        return (
            (rule.op == "ANY" or rule.op == msg.op)
            and (rule.src is None or rule.src == msg.src)
            and (rule.dst is None or rule.dst == msg.dst)
            and (rule.connection is None or rule.connection == msg.connection)
            and msg.size >= rule.size_min
            and (rule.size_max is None or msg.size <= rule.size_max)
            and (rule.rmr_context is None or rule.rmr_context == msg.rmr_context)
            and (rule.message is None or rule.message == msg.number)
        )

    def record(self, rule: Rule, msg: Message, **detail: object) -> None:
        """One line of the fault log."""
        entry = {
            "rule": rule.name,
            "action": rule.action,
            "link": f"{msg.src}>{msg.dst}",
            "connection": msg.connection,
            "message": msg.number,
            "op": msg.op,
            "size": msg.size,
            "seq": msg.seq,
            **detail,
        }
        self.log.append(json.dumps(entry, sort_keys=True))

    def jitter(self, rule: Rule, msg: Message) -> float:
        """The delay of a message in seconds: delay_ms plus jitter drawn reproducibly from the
        rule's distribution (uniform in [0, jitter], normal with sd jitter, exponential with
        mean jitter); never negative."""
        u = chance(self.seed + 1, rule.name, msg.src, msg.dst, msg.connection, msg.number)
        u = min(max(u, 1e-12), 1 - 1e-12)
        if rule.distribution == "normal":
            extra = NormalDist(0.0, rule.jitter_ms or 1e-9).inv_cdf(u)
        elif rule.distribution == "exponential":
            extra = -rule.jitter_ms * math.log(1 - u)
        else:
            extra = rule.jitter_ms * u
        return max(0.0, rule.delay_ms + extra) / 1000.0
