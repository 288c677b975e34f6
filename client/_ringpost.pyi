"""client/_ringpost.c: the Python client's common post, checked and written in C."""

from typing import Any

def post(
    eps: dict[int, Any],
    regions: dict[int, Any],
    opcode: int,
    need_bits: int,
    handle: Any,
    local_iov: Any,
    cookie: Any,
    remote: Any,
    flags: Any,
) -> bool | None: ...
