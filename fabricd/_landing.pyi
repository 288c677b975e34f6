"""fabricd/_landing.c: where a batch of RDMA Writes lands, in C."""

def views(
    ops: list[tuple[int, int, int]],
    rmr_context: int,
    start: int,
    end: int,
    origin: int,
    target: memoryview,
) -> list[memoryview] | None: ...
def ranges(ops: list[tuple[int, int, int]], rmr_context: int) -> list[tuple[int, int]] | None: ...
def merge(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]: ...
