"""Connection benchmarks: setup rate between two daemons (as dtestcm reports CPS), and many
connected endpoint pairs (daemon memory growth, and a write on each still completing)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.nodes import Fabric, fabric_for
from client.api import Ep, Ia
from proto.attrs import EpAttr
from proto.constants import EventNumber, MemPriv, MemType

WAIT_US = 60_000_000
CONN_QUAL = 45249


@dataclass
class ConnResult:
    """What a connection run measured."""

    count: int
    seconds: float
    rss_growth_MB: tuple[float, float] = (0.0, 0.0)  # initiator's node, target's node
    writes_completed: int = 0

    @property
    def per_second(self) -> float:
        """Connections per second, from the first connect to the last ESTABLISHED."""
        return self.count / self.seconds


def rss_MB(pid: int) -> float:
    """Resident memory of a process in MB (10^6 bytes)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    return 0.0


def run(fabric: Fabric, count: int, daemons: tuple[int, int] | None, write: bool) -> ConnResult:
    """Connect ``count`` pairs; with ``write``, also a 64-byte RDMA Write on each."""
    acceptor = subprocess.Popen(
        [sys.executable, "-m", "bench.acceptor", fabric.target, str(CONN_QUAL), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert acceptor.stdout is not None and acceptor.stdin is not None
    try:
        if acceptor.stdout.readline().strip() != "LISTENING":
            raise RuntimeError("the acceptor did not start")
        with Ia(fabric.initiator) as ia:
            pz = ia.pz_create()
            evd = ia.evd_create(2 * count + 8)
            attr = EpAttr(max_recv_dtos=1, max_request_dtos=1)
            eps: list[Ep] = [ia.ep_create(pz, evd, evd, evd, attr) for _ in range(count)]
            before = tuple(rss_MB(pid) for pid in daemons) if daemons else (0.0, 0.0)
            t0 = time.perf_counter()
            for ep in eps:
                ep.connect(fabric.target_address, CONN_QUAL, WAIT_US)
            established = 0
            while established < count:
                event, _ = evd.wait(WAIT_US)
                if event.event_number != EventNumber.CONNECTION_EVENT_ESTABLISHED:
                    raise RuntimeError(f"a connect ended in {event.event_number.name}")
                established += 1
            seconds = time.perf_counter() - t0
            result = ConnResult(count, seconds)
            triplet = json.loads(acceptor.stdout.readline())
            remote = [triplet["address"], 64, triplet["rmr_context"]]
            if daemons:
                after = (rss_MB(daemons[0]), rss_MB(daemons[1]))
                result.rss_growth_MB = (after[0] - before[0], after[1] - before[1])
            if write:
                buf = ia.alloc(64)
                lmr = ia.lmr_create(MemType.VIRTUAL, buf, 64, pz, MemPriv.ALL)
                for i, ep in enumerate(eps):
                    ep.post_rdma_write([lmr.triplet()], i, remote)
                for _ in eps:
                    event, _ = evd.wait(WAIT_US)
                    result.writes_completed += event.status == 0
        return result
    finally:
        acceptor.stdin.close()
        acceptor.wait(30)
        acceptor.stdout.close()


def main(args: Any) -> int:
    """``--op connect``: setup rate; ``--op scale``: memory and a write per pair."""
    count = args.iters or 1000
    with fabric_for(args) as fabric:
        result = run(fabric, count, fabric.daemons, write=args.op == "scale")
    row = {
        "op": args.op,
        "mode": "bw",
        "size": 64 if args.op == "scale" else 0,
        "iters": count,
        "window": count,
        "same_node": args.same_node,
        "conn_per_s": round(result.per_second, 1),
        "rss_growth_MB": [round(v, 1) for v in result.rss_growth_MB],
        "writes_completed": result.writes_completed,
    }
    if args.json:
        print(json.dumps(row), flush=True)
    else:
        print(
            f" connections: {count}, {result.seconds * 1e6 / count:.1f} usec each, "
            f"CPS {result.per_second:.0f}, total {result.seconds:.2f} s"
        )
        if args.op == "scale":
            grow_a, grow_b = result.rss_growth_MB
            print(
                f" daemon memory growth: initiator node {grow_a:.1f} MB, target node "
                f"{grow_b:.1f} MB; 64 B writes completed: {result.writes_completed}/{count}"
            )
    ok = args.op != "scale" or result.writes_completed == count
    return 0 if ok else 1
