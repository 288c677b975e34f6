"""fabricd/_lanes.c: the lanes of a peer's read, in C."""

from collections.abc import Callable
from typing import Any

def lane(
    buffer: memoryview,
    start: int,
    end: int,
    grants: dict[int, Any],
    acked: int,
    before: Callable[[], None],
    write_type: int,
    max_header: int,
    put: Callable[[int, int, memoryview, int, int], bool] | None,
) -> tuple[int, int]: ...
def acks(
    buffer: memoryview,
    start: int,
    end: int,
    acked: int,
    limit: int,
    ack_type: int,
    max_header: int,
) -> tuple[int, int]: ...
def request(
    buffer: memoryview,
    start: int,
    end: int,
    frame_type: int,
    count: int,
    max_header: int,
) -> tuple[int, list[object] | None]: ...
def serve(
    buffer: memoryview,
    start: int,
    end: int,
    seq: int,
    reads_in: int,
    max_in: int,
    max_size: int,
    grants: dict[int, Any],
    req_type: int,
    resp_type: int,
    max_header: int,
) -> tuple[int, bytes | None]: ...
def read_resp(
    buffer: memoryview,
    start: int,
    end: int,
    seq: int,
    sink: memoryview,
    resp_type: int,
    max_header: int,
) -> tuple[int, int]: ...
def put_process(pid: int, address: int, source: memoryview, offset: int, length: int) -> bool: ...
