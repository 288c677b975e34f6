"""Fault rules: which outgoing peer messages a fault hits, decided reproducibly.

A decision is a function of (seed, rule name, directed link, connection, message number) only,
never of the clock, so the same seed, rules and workload fire the same faults; every firing is
one JSON line of the fault log (no timestamps: two runs give the same log byte for byte).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Final

ACTIONS: Final = frozenset(
    {"drop", "delay", "duplicate", "corrupt", "status", "reset", "blackhole", "rnr", "bandwidth"}
)
"""drop: lost on the wire, retried by the RC layer (past the retry count: DTO_ERR_TRANSPORT);
delay: held for delay_ms (+ jitter_ms); duplicate: sent twice; corrupt: bytes flipped, detected
(treated as lost) or silent (wrong bytes land); status: the DTO completes with ``status`` and
the connection breaks; reset: the connection is reset; blackhole: nothing gets through;
rnr: the receiver is not ready past the retry count (DTO_ERR_RECEIVER_NOT_READY);
bandwidth: the link carries at most rate_MBps (messages queue behind each other)."""

OPS: Final = frozenset(
    {"RDMA_WRITE", "RDMA_READ", "SEND", "RMR_BIND", "READ_RESP", "ACK", "CM", "HEARTBEAT", "ANY"}
)
RETRY_COUNT: Final = 7  # the RC transport's retries (IB's default) before DTO_ERR_TRANSPORT


@dataclass
class Rule:
    """One fault rule; ``None`` fields match anything."""

    name: str
    action: str
    op: str = "ANY"
    src: str | None = None  # node name the message leaves
    dst: str | None = None  # node name it goes to
    connection: int | None = None  # the link id at the sending node
    size_min: int = 0
    size_max: int | None = None
    rmr_context: int | None = None
    nth: int | None = None  # only the nth matching message (1-based)
    message: int | None = None  # only this message number of the link (replayed faults)
    start_s: float = 0.0  # the time window, in seconds after the rule was installed
    end_s: float | None = None
    probability: float = 1.0
    count: int | None = None  # fire at most this often
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    distribution: str = "uniform"  # of the jitter: uniform, normal (sd), exponential (mean)
    rate_MBps: float = 0.0  # for "bandwidth"
    status: int = 8  # for "status": the completion status to force (default TRANSPORT)
    silent: bool = False  # for "corrupt": let the wrong bytes land
    part: str = "payload"  # for "corrupt": the payload, or the header (an RDMA address)
    fired: int = 0
    seen: int = field(default=0, repr=False)
    installed: float = field(default=0.0, repr=False)

    def validate(self) -> None:
        """Refuse a rule that could never mean anything."""
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}; one of {sorted(ACTIONS)}")
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}; one of {sorted(OPS)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("probability must be within 0..1")
        if not self.name:
            raise ValueError("a rule needs a name")
        if self.distribution not in ("uniform", "normal", "exponential"):
            raise ValueError(f"unknown distribution {self.distribution!r}")
        if self.part not in ("payload", "header"):
            raise ValueError(f"corrupt part is payload or header, not {self.part!r}")
        if self.action == "bandwidth" and self.rate_MBps <= 0:
            raise ValueError("a bandwidth rule needs rate_MBps > 0")

    def to_json(self) -> dict[str, Any]:
        """The rule as the admin API shows it."""
        out = asdict(self)
        del out["seen"], out["installed"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rule:
        """Build and validate a rule from its JSON form."""
        hidden = ("seen", "installed")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k not in hidden}
        rule = cls(**known)
        rule.validate()
        return rule


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

    @property
    def active(self) -> bool:
        """Are there rules at all (the data path skips the engine when not)?"""
        return bool(self.rules)

    def add(self, rule: Rule, now: float = 0.0) -> None:
        """Install a rule (replacing one of the same name); its time window starts ``now``."""
        rule.validate()
        rule.installed = now
        self.rules[rule.name] = rule

    def remove(self, name: str) -> bool:
        """Remove a rule; False when there was none of that name."""
        return self.rules.pop(name, None) is not None

    def clear(self) -> None:
        """Remove every rule."""
        self.rules.clear()

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

    def record(self, rule: Rule, msg: Message, **detail: Any) -> None:
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


def replay_rules(log_lines: list[str]) -> list[Rule]:
    """Rules that fire exactly where a fault log says faults fired (fabricctl fault replay)."""
    rules = []
    for i, line in enumerate(log_lines):
        entry = json.loads(line)
        src, _, dst = entry["link"].partition(">")
        extra = {k: entry[k] for k in ("status", "silent", "delay_ms") if k in entry}
        rules.append(
            Rule.from_json(
                {
                    "name": f"replay-{i}-{entry['rule']}",
                    "action": entry["action"],
                    "op": entry["op"],
                    "src": src,
                    "dst": dst,
                    "connection": entry["connection"],
                    "message": entry["message"],
                    "count": 1,
                    **extra,
                }
            )
        )
    return rules
