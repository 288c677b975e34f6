"""fabricd/_plaintake.c: the daemon's intake of the common WQE, in C."""

from typing import Any

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
    fetchable: bool,
) -> tuple[list[Any], list[memoryview], int, bool, Any]: ...
