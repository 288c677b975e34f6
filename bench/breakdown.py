"""Where the time of a small operation goes: wall time per operation at window 1 beside the CPU
time (user and kernel) each process spends on it, and a bare consumer-daemon call round trip
(``python -m bench.breakdown [--op write|read|send] [--size 64] [--iters 5000]``).

``--driver c``: the same for a C program through libdatfabric, Debian's dapltest -T P (RDMA
Write): its own timers inside the provider's post and the reap that returns a completion, at
pipeline 64 polling, and its latency at pipeline 1 blocking."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from bench import dapl
from bench.fabric import Session
from bench.nodes import Fabric
from fabricd.launch import start_node


def cpu(pid: int) -> tuple[float, float]:
    """User and kernel seconds a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def main(argv: list[str] | None = None) -> None:
    """Measure and print the breakdown."""
    p = argparse.ArgumentParser(prog="python -m bench.breakdown")
    p.add_argument("--op", choices=["write", "read", "send"], default="write")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--iters", type=int, default=5000)
    p.add_argument("--driver", choices=["python", "c"], default="python")
    args = p.parse_args(argv)
    if args.driver == "c":
        c_driver(args.size, args.iters)
        return
    with tempfile.TemporaryDirectory(prefix="datfabric-breakdown-") as tmp:
        a = start_node("bd-a", os.path.join(tmp, "a.sock"))
        b = start_node("bd-b", os.path.join(tmp, "b.sock"))
        try:
            session = Session(Fabric(a.socket, b.socket, b.address), args.op, args.size, 1)
            session.run(args.op, args.size, 500, 1, lambda _: None)  # warm up
            pids = {"consumer": os.getpid(), "its daemon": a.proc.pid, "peer daemon": b.proc.pid}
            before = {name: cpu(pid) for name, pid in pids.items()}
            _, lat, _ = session.run(args.op, args.size, args.iters, 1, lambda _: None)
            print(
                f"{args.size} B {args.op}, window 1: median {statistics.median(lat):.0f} us "
                f"from post to completion"
            )
            for name, pid in pids.items():
                user, kernel = (
                    now - then for now, then in zip(cpu(pid), before[name], strict=True)
                )
                print(
                    f"  {name:<12} CPU per operation: user {user / args.iters * 1e6:5.1f} us,"
                    f" kernel {kernel / args.iters * 1e6:5.1f} us"
                )
            calls = []
            for _ in range(2000):
                t0 = time.perf_counter()
                session.ia.query()
                calls.append(time.perf_counter() - t0)
            print(f"  consumer-daemon call round trip: {statistics.median(calls) * 1e6:.0f} us")
            session.close()
        finally:
            a.stop()
            b.stop()


def c_driver(size: int, iters: int) -> None:
    """dapltest -T P's figures for RDMA Writes of ``size`` bytes."""
    if not dapl.available():
        return
    with dapl.served() as client:
        dapl.perf(client, "p", size, 64, 2000)  # warm up
        flow = dapl.perf(client, "p", size, 64, iters * 10)
        lat = dapl.perf(client, "b", size, 1, iters)
    print(
        f"{size} B RDMA Write, C driver (dapltest -T P), pipeline 64 polling: "
        f"{flow.ops_per_s:.0f} ops/s\n"
        f"  in the provider per operation: post {flow.post_us:.2f} us, reap {flow.reap_us:.2f} us"
        f" (sum {flow.post_us + flow.reap_us:.2f} us)\n"
        f"  dapltest's CPU per operation (polling, setup included): {flow.cpu_us:.1f} us\n"
        f"pipeline 1 blocking: {lat.latency_us:.0f} us mean from post to completion,"
        f" CPU per operation {lat.cpu_us:.1f} us"
    )


if __name__ == "__main__":
    main()
