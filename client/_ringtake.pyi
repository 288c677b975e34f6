"""client/_ringtake.c: the Python client's common completions, read from its event queue in C."""

from typing import Any

def completions(
    view: memoryview,
    first: int,
    count: int,
    cls: type[Any],
    number: int,
    evd: int,
    mean: int,
) -> tuple[list[Any], int, int]: ...
