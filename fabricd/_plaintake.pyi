"""fabricd/_plaintake.c: the daemon's intake of the common WQE, in C."""

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

def take(
    ring: memoryview,
    at: int,
    count: int,
    entry_size: int,
    opcodes: int,
    lmrs: dict[int, Any],
    owner: int,
    pz: int,
    need: int,
    before: Any,
    stage: memoryview,
) -> tuple[list[Any], list[memoryview], int, bool, Any]: ...
def receives(
    ring: memoryview,
    at: int,
    count: int,
    entry_size: int,
    opcodes: int,
    lmrs: dict[int, Any],
    owner: int,
    pz: int,
    need: int,
    before: Any,
    make: Callable[[int, int, list[memoryview], int, list[Any]], T],
) -> tuple[list[T], Any]: ...
def fence() -> None: ...
