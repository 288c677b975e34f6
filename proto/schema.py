"""Typed records for the msgpack planes: a NamedTuple per call, result and event.

A record class names its fields with their types; ``Annotated[T, Bad(...)]`` says which DatError
(type and subtype) a wrong value of that field gives. ``parse(cls, values)`` checks arity and
types and builds the record, so a handler only ever sees well-typed values. A record encodes as
the msgpack array of its fields (a NamedTuple is a tuple), so the wire stays positional while
both sides name every field the same way.

Types understood: int (bools are not ints), bool, float, str, bytes, list[...] and dict[...]
(the container is checked, its elements by whoever reads them), ``T | None``, and ``object``;
``Range`` bounds an int (``U64``).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Final, NamedTuple, TypeVar

from proto.constants import DatReturnSubtype
from proto.errors import DatError, DatInvalidParameter


@dataclass(frozen=True, slots=True)
class Bad:
    """The DatError a wrong value of one field gives (dat_*'s RETURN VALUES)."""

    error: type[DatError]
    subtype: DatReturnSubtype = DatReturnSubtype.NO_SUBTYPE


def arg(n: int) -> Bad:
    """DAT_INVALID_PARAMETER | DAT_INVALID_ARGn (``n`` counts the C call's parameters)."""
    return Bad(DatInvalidParameter, DatReturnSubtype[f"INVALID_ARG{n}"])


@dataclass(frozen=True, slots=True)
class Range:
    """An int field's bounds (inclusive): ``Annotated[int, Bad(...), U64]``."""

    low: int
    high: int


U64: Final = Range(0, 2**64 - 1)
"""A value C carries in 64 unsigned bits (a DAT_PVOID, a DAT_DTO_COOKIE)."""

PARAM: Final = Bad(DatInvalidParameter)
"""A field without a more precise error."""

Check = Callable[[object], bool]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field: its name, the check of its value, and the error a wrong one gives."""

    name: str
    check: Check
    bad: Bad
    kind: str


def _exact(t: type) -> Check:
    if t is int:
        return lambda v: type(v) is int
    if t is float:
        return lambda v: type(v) in (int, float)
    return lambda v: isinstance(v, t)


def checker(hint: object) -> tuple[Check, str]:
    """A check for one resolved type hint, and its name for error messages."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [checker(h) for h in typing.get_args(hint)]
        checks = [c for c, _ in parts]
        return (lambda v: any(c(v) for c in checks)), " | ".join(n for _, n in parts)
    if hint is type(None):
        return (lambda v: v is None), "None"
    if hint is object:
        return (lambda v: True), "any"
    base = origin or hint
    if not isinstance(base, type):
        raise TypeError(f"schema type {hint!r} is not understood")
    return _exact(base), base.__name__


def _bounded(check: Check, r: Range) -> Check:
    return lambda v: check(v) and r.low <= v <= r.high  # type: ignore[operator]


R = TypeVar("R", bound=tuple[object, ...])

_SPECS: dict[type, tuple[FieldSpec, ...]] = {}


def fields(cls: type[R]) -> tuple[FieldSpec, ...]:
    """The field specs of a record class (computed once)."""
    specs = _SPECS.get(cls)
    if specs is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        out = []
        for name in cls._fields:  # type: ignore[attr-defined]
            hint, bad, bounds = hints[name], PARAM, None
            if typing.get_origin(hint) is Annotated:
                hint, *extras = typing.get_args(hint)
                bad = next((e for e in extras if isinstance(e, Bad)), PARAM)
                bounds = next((e for e in extras if isinstance(e, Range)), None)
            check, kind = checker(hint)
            if bounds is not None:
                check, kind = _bounded(check, bounds), f"{kind} in {bounds.low}..{bounds.high}"
            out.append(FieldSpec(name, check, bad, kind))
        specs = _SPECS[cls] = tuple(out)
    return specs


def parse(cls: type[R], values: object, what: str = "") -> R:
    """Build ``cls`` from a msgpack array, or raise the DatError of the first wrong field."""
    specs = fields(cls)
    label = what or cls.__name__
    if not isinstance(values, (list, tuple)) or len(values) != len(specs):
        count = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise DatInvalidParameter(message=f"{label} takes {len(specs)} fields, got {count}")
    for spec, value in zip(specs, values, strict=True):
        if not spec.check(value):
            raise spec.bad.error(
                spec.bad.subtype, f"{label}: {spec.name} must be {spec.kind}, not {value!r}"
            )
    return cls(*values)


class Empty(NamedTuple):
    """A call without arguments, or a result without values."""


def wire(record: Sequence[object]) -> list[object]:
    """A record as the msgpack array it travels as."""
    return list(record)
