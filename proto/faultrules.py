"""The fault-rule schema: what a rule may say, shared by the daemon and the tools that install
rules (validation, the JSON form of the admin API, and rules replayed from a fault log).

Pure: no I/O; the decisions themselves are fabricd.faults.
"""

from __future__ import annotations

import json
import typing
from dataclasses import asdict, dataclass, field
from typing import Final

from proto.schema import checker

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
    {
        "RDMA_WRITE",
        "RDMA_READ",
        "SEND",
        "RMR_BIND",
        "READ_RESP",
        "ACK",
        "CM",
        "HEARTBEAT",
        "ATOMIC",  # dat_ib_post_fetch_and_add, dat_ib_post_cmp_and_swap
        "ATOMIC_RESP",  # the original value coming back
        "RDMA_WRITE_IMMED",  # dat_ib_post_rdma_write_immed
        "ANY",
    }
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

    def to_json(self) -> dict[str, object]:
        """The rule as the admin API shows it."""
        out = asdict(self)
        del out["seen"], out["installed"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Rule:
        """Build and validate a rule from its JSON form."""
        hints = typing.get_type_hints(cls)
        rule = cls(name="", action="")
        for key, value in data.items():
            if key not in cls.__dataclass_fields__ or key in ("seen", "installed"):
                continue
            check, kind = checker(hints[key])
            if not check(value):
                raise ValueError(f"{key} must be {kind}, not {value!r}")
            setattr(rule, key, value)
        rule.validate()
        return rule


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
