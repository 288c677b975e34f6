"""fabricd/_receives.c: where the Sends of a batch land, in C."""

from collections.abc import Sequence
from typing import Any

def sends(
    payload: bytes | bytearray | memoryview,
    at: int,
    lengths: Sequence[int],
    i: int,
    recvs: Any,
    done: list[tuple[int, int, int]],
    taken: list[Any],
    bodies: list[memoryview],
) -> tuple[int, int]: ...
def planned(
    payload: bytes | bytearray | memoryview,
    at: int,
    lengths: Sequence[int],
    i: int,
    recvs: Any,
    done: list[tuple[int, int, int]],
    taken: list[Any],
    bodies: list[memoryview],
    pid: int,
    pieces: list[tuple[int, int, int]],
) -> tuple[int, int, int]: ...
