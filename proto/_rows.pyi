"""proto/_rows.c: fixed-size entries written from rows of fields, in C."""

from collections.abc import Sequence

def write_rows(
    view: memoryview,
    mine: int,
    mask: int,
    entry_size: int,
    room: int,
    ep: int,
    kind: int,
    rows: Sequence[tuple[int, ...]],
    flags_at: int,
    cookie_at: int,
    length_at: int,
) -> tuple[int, bool]: ...
def pack_writes(
    rows: Sequence[tuple[int, ...]], address_at: int, context_at: int, length_at: int
) -> bytes: ...
