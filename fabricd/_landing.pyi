"""fabricd/_landing.c: where a batch of RDMA Writes lands, in C."""

def views(
    ops: list[tuple[int, int, int]],
    rmr_context: int,
    start: int,
    end: int,
    origin: int,
    target: memoryview,
) -> list[memoryview] | None: ...
