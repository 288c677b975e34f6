"""fabricd/_landing.c: where a batch of RDMA Writes or Sends lands, in C."""

from collections.abc import Sequence
from typing import Any

def views(
    ops: list[tuple[int, int, int]],
    rmr_context: int,
    start: int,
    end: int,
    origin: int,
    target: memoryview,
) -> list[memoryview] | None: ...
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
def ranges(ops: list[tuple[int, int, int]], rmr_context: int) -> list[tuple[int, int]] | None: ...
def merge(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]: ...
