"""What one IA and one daemon may hold (``fabricd --limit NAME=N``; docs/security.md).

Past a per-IA limit a create call answers DAT_INSUFFICIENT_RESOURCES with the object's
DAT_RESOURCE_* subtype and changes nothing; ``dat_ia_query`` advertises the per-IA limits as the
DAT attributes that name them (max_eps, max_evds, ...). Past a per-daemon limit a new IA or peer
stream is refused with a logged reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from proto.frames import MAX_HELLO_NAME

MAX_PRIVATE_DATA: Final = 256
"""The most private data a connection request, accept or reject carries (DAT's is 256 too)."""


@dataclass(frozen=True)
class Limits:
    """The limits of one daemon; every field is a count unless its name says bytes."""

    ia_pzs: int = 4096  # protection zones per IA (max_pzs)
    ia_evds: int = 16384  # EVDs per IA, the async EVD included (max_evds)
    ia_eps: int = 16384  # endpoints per IA, those a PSP makes included (max_eps)
    ia_lmrs: int = 65536  # LMRs per IA (max_lmrs)
    ia_rmrs: int = 65536  # RMRs per IA (max_rmrs)
    ia_listeners: int = 4096  # PSPs and RSPs per IA
    ia_srqs: int = 4096  # shared receive queues per IA (max_srqs)
    ia_bytes: int = 1 << 36  # bytes an IA registers, LMRs over LMRs not counted again
    consumers: int = 4096  # IAs open at once on one daemon
    peer_links: int = 65536  # peer streams at once (one per connection, either side)
    unread_bytes: int = 16 << 20  # replies and wake-ups an IA has not read (its socket's backlog)
    hello_name: int = MAX_HELLO_NAME  # characters of a HELLO's name, either plane (at most 256)
    private_data: int = MAX_PRIVATE_DATA  # bytes a consumer's connect/accept/reject carries (256)


CEILINGS: Final = {"hello_name": MAX_HELLO_NAME, "private_data": MAX_PRIVATE_DATA}
"""Limits that may be lowered only: what the wire and DAT allow."""


NAMES: Final = tuple(f.name for f in dataclasses.fields(Limits))


def parse(settings: list[str], base: Limits | None = None) -> Limits:
    """``["ia_eps=100", ...]`` over ``base`` (the defaults); ValueError names what is wrong."""
    values: dict[str, int] = {}
    for text in settings:
        name, sep, number = text.partition("=")
        if not sep or name not in NAMES:
            raise ValueError(f"--limit {text!r}: NAME=N with NAME one of {', '.join(NAMES)}")
        try:
            values[name] = int(number, 0)
        except ValueError:
            raise ValueError(f"--limit {text!r}: {number!r} is not a number") from None
        if not 1 <= values[name] <= CEILINGS.get(name, values[name]):
            raise ValueError(f"--limit {text!r}: a limit is 1..{CEILINGS.get(name, 'any')}")
    return dataclasses.replace(base or Limits(), **values)
