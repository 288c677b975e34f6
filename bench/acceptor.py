"""The passive side of the connection benchmarks, run as its own process.

``python -m bench.acceptor SOCKET CONN_QUAL COUNT``: creates COUNT endpoints up front, listens,
accepts every request with the next one, prints the triplet of its memory once all are
connected, and leaves when its standard input closes.
"""

from __future__ import annotations

import json
import sys

from client.api import Ia
from proto.attrs import EpAttr
from proto.constants import EventNumber, MemPriv, MemType

WAIT_US = 60_000_000


def main() -> None:
    sock, conn_qual, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ia = Ia(sock)
    pz = ia.pz_create()
    cr_evd = ia.evd_create(count + 8)
    evd = ia.evd_create(2 * count + 8)
    attr = EpAttr(max_recv_dtos=1, max_request_dtos=1)
    eps = [ia.ep_create(pz, evd, evd, evd, attr) for _ in range(count)]
    lmr = ia.lmr_create(MemType.VIRTUAL, ia.alloc(4096), 4096, pz, MemPriv.ALL)
    ia.psp_create(conn_qual, cr_evd)
    print("LISTENING", flush=True)
    for ep in eps:
        request, _ = cr_evd.wait(WAIT_US)
        ia.cr(request).accept(ep)
    established = 0
    while established < count:
        event, _ = evd.wait(WAIT_US)
        established += event.event_number == EventNumber.CONNECTION_EVENT_ESTABLISHED
    address, length, context = lmr.remote()
    print(json.dumps({"address": address, "length": length, "rmr_context": context}), flush=True)
    sys.stdin.read()
    ia.close()


if __name__ == "__main__":
    main()
