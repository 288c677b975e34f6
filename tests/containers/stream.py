"""A streaming consumer for the container tests: RDMA Writes until told to stop or broken.

Runs inside a workload container (the image has the project installed), mounted read-only:

    python /stream/stream.py server --conn-qual Q [--size N]
    python /stream/stream.py client --peer HOST:PORT --conn-qual Q [--size N] [--window W]

The server prints ``listening``, accepts one connection, gives its memory as an RMR triplet and
prints the connection event that ends it. The client prints ``streaming`` once connected, keeps
``--window`` RDMA Writes in flight and prints ``writes N`` every PROGRESS completions. On SIGTERM
it drains, reads the server's memory back, prints ``stopped after N writes, verified`` and exits
0; when a write fails it prints ``broken: ...`` and the connection event that follows, and exits 3.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from proto.constants import DtoCompletionStatus, EventNumber, MemPriv, MemType
from tools.demo import TRIPLET, Side, expect, pattern

ONE_HOUR_US = 3_600_000_000
PROGRESS = 200
BROKEN_EXIT = 3


def serve(ia: str, conn_qual: int, size: int) -> int:
    side = Side(ia, size, 2)
    try:
        cr_evd = side.ia.evd_create(8)
        psp = side.ia.psp_create(conn_qual, cr_evd)
        print("listening", flush=True)
        request = expect(cr_evd, EventNumber.CONNECTION_REQUEST_EVENT, "connection request")
        side.ia.cr(request).accept(side.ep, b"")
        expect(side.conn_evd, EventNumber.CONNECTION_EVENT_ESTABLISHED, "established")
        psp.free()
        side.send(side.triplet())
        print("accepted", flush=True)
        event, _ = side.conn_evd.wait(ONE_HOUR_US)
        print(f"event {EventNumber(event.event_number).name}", flush=True)
        return 0 if event.event_number == EventNumber.CONNECTION_EVENT_DISCONNECTED else 1
    finally:
        side.close()


def stream(ia: str, peer: str, conn_qual: int, size: int, window: int) -> int:
    stop: list[int] = []

    def on_term(signum: int, _frame: FrameType | None) -> None:
        stop.append(signum)

    signal.signal(signal.SIGTERM, on_term)
    side = Side(ia, size, window)
    check = side.ia.alloc(size)
    check_lmr = side.ia.lmr_create(MemType.VIRTUAL, check, size, side.pz, MemPriv.ALL)
    try:
        side.connect(peer, conn_qual)
        remote = list(TRIPLET.unpack(side.receive()))
        data = pattern(size, 11)
        side.data_buf.view[:] = data
        print("streaming", flush=True)
        posted = done = 0
        while True:
            while not stop and posted - done < window:
                side.ep.post_rdma_write([side.data.triplet()], posted, remote)
                posted += 1
            if done == posted:
                break
            event, _ = side.dto_evd.wait(ONE_HOUR_US)
            if event.status != DtoCompletionStatus.DTO_SUCCESS:
                status = DtoCompletionStatus(event.status).name
                print(f"broken: write {event.cookie} {status} after {done} writes", flush=True)
                conn, _ = side.conn_evd.wait(ONE_HOUR_US)
                print(f"event {EventNumber(conn.event_number).name}", flush=True)
                return BROKEN_EXIT
            done += 1
            if done % PROGRESS == 0:
                print(f"writes {done}", flush=True)
        side.ep.post_rdma_read([check_lmr.triplet()], 0, remote)
        expect(side.dto_evd, EventNumber.DTO_COMPLETION_EVENT, "read back")
        verdict = "verified" if bytes(check.view) == data else "DIFFERENT"
        print(f"stopped after {done} writes, {verdict}", flush=True)
        side.ep.disconnect()
        expect(side.conn_evd, EventNumber.CONNECTION_EVENT_DISCONNECTED, "disconnected")
        return 0 if verdict == "verified" else 1
    finally:
        side.close()


def main() -> None:
    p = argparse.ArgumentParser(prog="stream")
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--ia", default="/run/datfabric/fabricd.sock")
    p.add_argument("--peer", default="")
    p.add_argument("--conn-qual", type=int, required=True)
    p.add_argument("--size", type=int, default=65536)
    p.add_argument("--window", type=int, default=8)
    args = p.parse_args()
    if args.role == "server":
        sys.exit(serve(args.ia, args.conn_qual, args.size))
    sys.exit(stream(args.ia, args.peer, args.conn_qual, args.size, args.window))


if __name__ == "__main__":
    main()
