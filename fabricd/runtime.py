"""Settings of the daemon's own process that make its per-operation Python cheaper (the
daemon's process only: a consumer's process is its user's, and the client changes nothing there).
"""

from __future__ import annotations

import enum
import sys


def plain_enum_access() -> bool:
    """Drop Python 3.11's ``EnumType.__getattr__``, which 3.12 removed: with it every attribute
    read on every enum class (``Dtos.SEND``, ``EpState.CONNECTED``) goes through a Python-level
    lookup hook, ~105 ns against ~20 ns for any other class attribute (timeit), and the data
    path reads such members tens of times per operation. In 3.11 a member is in its class's
    dict already (itself, or a property that returns it), so the hook only ever supplied an
    AttributeError; with it gone a missing name still raises one. True if it was removed."""
    if sys.version_info >= (3, 12) or "__getattr__" not in vars(enum.EnumType):
        return False
    delattr(enum.EnumType, "__getattr__")
    return True
