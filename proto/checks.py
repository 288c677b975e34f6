"""Checks of local I/O vectors shared by the client (synchronous return codes) and the daemon.

A local iov is a list of LMR triplets ``[virtual_address, segment_length, lmr_context]``; a
segment of length 0 is ignored whatever its other fields hold (DAT 2.0 triplet rule).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proto.constants import DatReturnSubtype as Sub
from proto.constants import MemPriv
from proto.errors import (
    DatInvalidParameter,
    DatPrivilegesViolation,
    DatProtectionViolation,
)


@dataclass(frozen=True, slots=True)
class Region:
    """What both sides know of a registered LMR: its range, PZ and privileges."""

    address: int
    length: int
    pz: int
    privileges: MemPriv
    end: int = field(init=False, repr=False, compare=False)  # address + length
    privilege_bits: int = field(init=False, repr=False, compare=False)
    """``privileges`` as a plain int, for a driver's per-post check (IntFlag operators cost
    ~1 us)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "end", self.address + self.length)
        object.__setattr__(self, "privilege_bits", int(self.privileges))

    def contains(self, address: int, length: int) -> bool:
        """True when [address, address+length) lies inside the region."""
        return self.address <= address and address + length <= self.end


def is_int(value: object) -> bool:
    """An integer argument (enums count, bools do not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def parse_triplet(triplet: object, subtype: Sub = Sub.NO_SUBTYPE) -> tuple[int, int, int]:
    """Validate one ``[address, length, context]`` triplet; DAT_INVALID_PARAMETER with
    ``subtype`` (the argument the triplet is in) otherwise."""
    if (type(triplet) is list or type(triplet) is tuple) and len(triplet) == 3:
        address, length, context = triplet  # the common shape, checked inline
        if (
            type(address) is int
            and type(length) is int
            and type(context) is int
            and 0 <= address <= 0xFFFFFFFFFFFFFFFF
            and 0 <= length <= 0xFFFFFFFF
            and 0 <= context <= 0xFFFFFFFF
        ):
            return address, length, context
    return _parse_triplet(triplet, subtype)


def _parse_triplet(triplet: object, subtype: Sub) -> tuple[int, int, int]:
    """parse_triplet for every other shape: int subclasses accepted, the error for the rest."""
    if not isinstance(triplet, (list, tuple)) or len(triplet) != 3:
        msg = "a triplet is [virtual_address, segment_length, context]"
        raise DatInvalidParameter(subtype, msg)
    address, length, context = triplet
    for v in (address, length, context):
        if not is_int(v) or v < 0:
            raise DatInvalidParameter(subtype, f"triplet field {v!r} is not a non-negative int")
    if length > 0xFFFFFFFF or address > 0xFFFFFFFFFFFFFFFF or context > 0xFFFFFFFF:
        raise DatInvalidParameter(subtype, "triplet field out of its C type's range")
    return int(address), int(length), int(context)


def check_local_iov(
    iov: object,
    lookup: Callable[[int], Region | None],
    ep_pz: int,
    need: MemPriv,
    max_segments: int,
) -> list[tuple[Region, int, int]]:
    """Validate a local iov for a DTO; return (region, address, length) for each used segment.

    Raises DAT_INVALID_PARAMETER (too many segments, a segment outside its LMR),
    DAT_PRIVILEGES_VIOLATION (unknown LMR or a missing local privilege) and
    DAT_PROTECTION_VIOLATION (the LMR's PZ is not the endpoint's), as dat_ep_post_* specify.
    """
    if not isinstance(iov, (list, tuple)):
        raise DatInvalidParameter(Sub.INVALID_ARG3, "local_iov must be a list of triplets")
    if len(iov) > max_segments:
        raise DatInvalidParameter(
            Sub.INVALID_ARG2, f"{len(iov)} segments exceed the endpoint's {max_segments}"
        )
    used: list[tuple[Region, int, int]] = []
    need_bits = int(need)  # plain ints: Flag operators are slow
    for triplet in iov:
        address, length, context = parse_triplet(triplet, Sub.INVALID_ARG3)
        if length == 0:
            continue
        region = lookup(context)
        if region is None:
            raise DatPrivilegesViolation(message=f"lmr_context {context:#x} is not a valid LMR")
        if region.pz != ep_pz:
            raise DatProtectionViolation(message="the LMR's PZ is not the endpoint's PZ")
        missing = need_bits & ~int(region.privileges)
        if missing:
            raise DatPrivilegesViolation(message=f"the LMR lacks {MemPriv(missing)!r}")
        if not region.contains(address, length):
            raise DatInvalidParameter(
                Sub.INVALID_ARG3, f"segment {address:#x}+{length} lies outside its LMR"
            )
        used.append((region, address, length))
    return used
