"""A consumer run as its own process: it accepts one connection, publishes an RMR triplet and
then does nothing (the tests SIGSTOP it) until asked to check its own memory.

Usage: python -m tests.integration.passive_consumer SOCKET CONN_QUAL SIZE
Its memory holds ``own_pattern(SIZE)`` in the first half; the second half is the write target.
"""

from __future__ import annotations

import hashlib
import json
import sys

from client.api import Ia
from proto.constants import EventNumber, MemPriv, MemType

WAIT_US = 20_000_000


def own_pattern(size: int) -> bytes:
    """The bytes the passive consumer puts in the first half of its region."""
    return bytes((7 * i + 3) & 0xFF for i in range(size // 2))


def main() -> None:
    sock, conn_qual, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ia = Ia(sock)
    pz = ia.pz_create()
    evd = ia.evd_create(16)
    ep = ia.ep_create(pz, evd, evd, evd)
    buf = ia.alloc(size)
    buf.view[: size // 2] = own_pattern(size)
    lmr = ia.lmr_create(MemType.VIRTUAL, buf, size, pz, MemPriv.ALL)
    ia.psp_create(conn_qual, evd)
    print("LISTENING", flush=True)
    event, _ = evd.wait(WAIT_US)
    assert event.event_number == EventNumber.CONNECTION_REQUEST_EVENT, event
    ia.cr(event).accept(ep)
    event, _ = evd.wait(WAIT_US)
    assert event.event_number == EventNumber.CONNECTION_EVENT_ESTABLISHED, event
    address, length, context = lmr.remote()
    print(json.dumps({"address": address, "length": length, "rmr_context": context}), flush=True)
    line = sys.stdin.readline().split()  # blocks; the test stops this process meanwhile
    digest = hashlib.sha256(bytes(buf.view[size // 2 :])).hexdigest()
    print("MATCH" if line == ["check", digest] else f"DIFFER {digest}", flush=True)
    ia.close()


if __name__ == "__main__":
    main()
