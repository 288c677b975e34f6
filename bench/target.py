"""The benchmark's target consumer, run as its own process.

``python -m bench.target SOCKET CONN_QUAL SIZE OP RECVS``: registers SIZE bytes filled with
``pattern(SIZE)``, accepts one connection and prints its RMR triplet as JSON. For RDMA Write and
Read it then only waits for the disconnect (the daemon does all the work); for Send it keeps
RECVS receives posted, reposting them in bursts: it waits for half of them to complete
(dat_evd_wait's threshold, as a receiver moderates its CQ; whatever came within BURST_WAIT_US
when fewer do) and reposts those together, one doorbell for the burst. At the end it prints a
digest of its memory and of the last message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys

from client.api import Ia
from client.handles_evd import Evd
from client.records import Event
from proto.attrs import EpAttr
from proto.constants import Dtos, EventNumber, MemPriv, MemType
from proto.errors import DatQueueEmpty, DatTimeoutExpired

WAIT_US = 60_000_000
BURST_WAIT_US = 2000  # a burst that does not fill: the tail of a run, or a window of 1


def pattern(size: int, seed: int = 1) -> bytes:
    """Deterministic bytes both sides can compute."""
    block = hashlib.sha256(seed.to_bytes(8, "big")).digest() * 128
    return (block * (size // len(block) + 1))[:size]


def _burst(evd: Evd, threshold: int, timeout: int) -> list[Event]:
    """The events of one wait for ``threshold`` of them, and those queued with them; what came
    within ``timeout`` us if fewer did (none: the wait starts again)."""
    try:
        first, more = evd.wait(timeout, threshold)
    except DatTimeoutExpired:
        events = []
        with contextlib.suppress(DatQueueEmpty):
            while True:
                events.append(evd.dequeue())
        return events
    return [first, *(evd.dequeue() for _ in range(more))]


def main() -> None:
    sock, conn_qual, size, op, recvs = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
    )
    ia = Ia(sock)
    pz = ia.pz_create()
    evd = ia.evd_create(4 * recvs + 16)
    ep = ia.ep_create(pz, evd, evd, evd, EpAttr(max_recv_dtos=recvs, max_rdma_read_in=64))
    buf = ia.alloc(size)
    buf.view[:] = pattern(size)
    lmr = ia.lmr_create(MemType.VIRTUAL, buf, size, pz, MemPriv.ALL)
    if op == "send":
        for i in range(recvs):
            ep.post_recv([lmr.triplet()], i)
    ia.psp_create(conn_qual, evd)
    print("LISTENING", flush=True)
    event, _ = evd.wait(WAIT_US)
    ia.cr(event).accept(ep)
    address, length, context = lmr.remote()
    print(json.dumps({"address": address, "length": length, "rmr_context": context}), flush=True)
    last = 0
    received = 0
    # the loop's constants looked up once (an enum member lookup costs a client ~0.2 us)
    dto, receive, iov = EventNumber.DTO_COMPLETION_EVENT, Dtos.RECEIVE, [lmr.triplet()]
    ends = (EventNumber.CONNECTION_EVENT_DISCONNECTED, EventNumber.CONNECTION_EVENT_BROKEN)
    # Sends: bursts of half the receives. Writes and Reads: nothing comes before the
    # disconnect, so one wait, which sleeps after its spin (a wait that timed out and began
    # again would spin again, on the daemons' cores)
    threshold, timeout = (max(1, recvs // 2), BURST_WAIT_US) if op == "send" else (1, WAIT_US)
    done = False
    while not done:
        for event in _burst(evd, threshold, timeout):
            if event.event_number == dto:
                if event.operation == receive and event.status == 0:
                    received += 1
                    last = event.transfered_length
                    ep.post_recv(iov, event.cookie)
            elif event.event_number in ends:
                done = True
                break
    digest = hashlib.sha256(bytes(buf.view[:last])).hexdigest()
    print(json.dumps({"received": received, "last_digest": digest}), flush=True)
    ia.close()


if __name__ == "__main__":
    main()
