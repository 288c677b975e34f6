"""What the NIC core costs per operation with no socket and no other process: two nodes of the
in-memory fabric (tests/core's harness, as the core suite runs it) in this process, 64 small
Writes or Sends posted per burst (``--burst``), then the fabric run until all complete.

``python -m bench.inmemory [--op write|send] [--size 64] [--target shm|process] [--bursts N]
[--burst 64]``

It prints, per operation, the consumer's post (the Python client's core), the run of both
daemons' cores (the initiator's intake, batching and completions, the target's landing,
receives and ACK, and the harness's in-memory pipes and trace), and taking the completions,
each the best of eight chunks of bursts (the least disturbed). The client's two figures are
measured first, with CPython 3.11's enum lookup hook in place as a client process has it; then
the hook is dropped, as the daemon drops it (fabricd.runtime), and the cores are measured.
``--target process``: the target's memory is its consumer's own (a C program's LMRs, reached
through cross-memory attach, here the harness's stand-in), as for the C driver. Deterministic
enough to compare two revisions of the core a few percent apart, which the wire's noise
hides. A smaller ``--burst`` shows what the daemons pay per look at a queue, beside what they
pay per operation: the Python client's posts reach the daemon a few at a time, a C program's
a window at a time."""

from __future__ import annotations

import argparse
import time

from fabricd.runtime import plain_enum_access
from proto.attrs import EpAttr
from proto.constants import Dtos
from tests.core.flows import Side, connect, side
from tests.core.harness import Fabric
from tests.core.test_process_memory import BASE, own_lmr

BURST = 64  # operations posted per burst, by default
MAX_BURST = 256  # at most what the sides' EVDs hold (tests.core.flows.side's qlen)
CHUNKS = 8


def _pair(
    size: int, process: bool, burst: int = BURST
) -> tuple[Fabric, Side, Side, list[int], list[int]]:
    """Two connected sides, and the target's buffer (its shared memory, or its process's own)
    as an LMR triplet (for receives) and an RMR triplet (for Writes)."""
    fabric = Fabric()
    attr = EpAttr(max_request_dtos=burst, max_recv_dtos=burst)
    a = side(fabric, fabric.add_node("n1"), burst * size, attr=attr)
    b = side(fabric, fabric.add_node("n2"), burst * size, attr=attr)
    connect(fabric, a, b)
    if not process:
        return fabric, a, b, b.triplet(0, size), b.rmr(0, size)
    fabric.processes.place(b.c.pid, BASE, bytes(size))
    lmr_context, rmr_context = own_lmr(b, BASE, size)
    return fabric, a, b, [BASE, size, lmr_context], [BASE, size, rmr_context]


def measure(
    op: str, size: int, process: bool, bursts: int, burst: int = BURST
) -> tuple[float, float, float]:
    """Microseconds per operation: (post, run, completions), each the best chunk's."""
    fabric, a, b, target, remote = _pair(size, process, burst)
    local = a.triplet(0, size)
    sends = op == "send"

    def one_burst() -> tuple[float, float, float]:
        if sends:  # the receiver's reposts are its consumer's, not timed
            for i in range(burst):
                b.c.post(Dtos.RECEIVE, b.ep, [target], i, None, 0)
        t0 = time.perf_counter()
        for i in range(burst):
            if sends:
                a.c.post(Dtos.SEND, a.ep, [local], i, None, 0)
            else:
                a.c.post(Dtos.RDMA_WRITE, a.ep, [local], i, remote, 0)
        t1 = time.perf_counter()
        fabric.run()
        t2 = time.perf_counter()
        done = a.events()
        t3 = time.perf_counter()
        if len(done) != burst or (sends and len(b.events()) != burst):
            raise RuntimeError(f"a burst of {burst} completed {len(done)}")
        fabric.trace.clear()
        fabric.processes.writes.clear()
        return t1 - t0, t2 - t1, t3 - t2

    for _ in range(max(bursts // 4, 1)):  # warm up
        one_burst()
    best = [float("inf")] * 3
    per_chunk = max(bursts // CHUNKS, 1)
    for _ in range(CHUNKS):
        sums = [0.0, 0.0, 0.0]
        for _ in range(per_chunk):
            for k, t in enumerate(one_burst()):
                sums[k] += t
        best = [min(x, s / per_chunk / burst * 1e6) for x, s in zip(best, sums, strict=True)]
    return best[0], best[1], best[2]


def main(argv: list[str] | None = None) -> None:
    """Measure and print one line."""
    p = argparse.ArgumentParser(prog="python -m bench.inmemory")
    p.add_argument("--op", choices=["write", "send"], default="write")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--target", choices=["shm", "process"], default="shm")
    p.add_argument("--bursts", type=int, default=400)
    p.add_argument("--burst", type=int, default=BURST, help="operations posted per burst")
    args = p.parse_args(argv)
    if not 0 < args.burst <= MAX_BURST:
        p.error(f"--burst: 1..{MAX_BURST} operations")
    process = args.target == "process"
    post, _, events = measure(args.op, args.size, process, args.bursts, args.burst)  # a client
    plain_enum_access()  # as the daemon runs
    _, run, _ = measure(args.op, args.size, process, args.bursts, args.burst)
    print(
        f"{args.size} B {args.op}, {args.burst} per burst, target memory {args.target}:"
        f" post {post:.2f} us, both daemons' cores {run:.2f} us,"
        f" completions {events:.2f} us per operation (best of {CHUNKS} chunks)"
    )


if __name__ == "__main__":
    main()
