"""The admin plane's calls (fault rules, key revocation, node status): their argument and
result records, re-exported by proto.calls, whose METHODS names them with admin=True."""

from __future__ import annotations

from typing import Annotated, NamedTuple

from proto.schema import arg

# -- arguments ---------------------------------------------------------------------------------


class FaultAdd(NamedTuple):
    """Admin: install fault rules (JSON objects), optionally reseeding the engine first."""

    rules: Annotated[list[dict[str, object]], arg(1)]
    seed: Annotated[int | None, arg(2)]


class FaultRemove(NamedTuple):
    """Admin: remove one rule by name."""

    name: Annotated[str, arg(1)]


class FaultLog(NamedTuple):
    """Admin: the fault log, cleared after reading when ``clear``."""

    clear: Annotated[bool, arg(1)]


class RmrRevoke(NamedTuple):
    """Admin: make an rmr_context of this node fail every later access."""

    rmr_context: Annotated[int, arg(1)]


# -- results -----------------------------------------------------------------------------------


class RuleCount(NamedTuple):
    """How many fault rules are installed after the call."""

    rules: int


class FaultRules(NamedTuple):
    """Admin: the rules as JSON objects and the engine's seed."""

    rules: list[dict[str, object]]
    seed: int


class FaultLines(NamedTuple):
    """Admin: the fault log's JSON lines."""

    lines: list[str]
