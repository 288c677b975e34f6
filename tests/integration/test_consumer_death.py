"""A consumer that dies without dat_ia_close: its IA is freed, its peer sees DISCONNECTED, and
no shared memory of it is left behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from client.api import Ia
from fabricd.launch import Node
from proto.constants import EpState, EventNumber, MemPriv, MemType
from tests.integration.flows import WAIT_US, memfds, wait_event


def test_killed_consumer_frees_its_ia_and_memory(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.passive_consumer", b.socket, "778", "65536"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "LISTENING"
        mine = f"datfabric-{proc.pid}-"
        assert any(n.endswith("-arena") for n in memfds(b.proc.pid, mine)), "its arena is mapped"
        assert any("-eq" in n for n in memfds(b.proc.pid, mine)), "and its event queues"
        with Ia(a.socket) as ia:
            pz = ia.pz_create()
            evd = ia.evd_create(16)
            ep = ia.ep_create(pz, evd, evd, evd)
            buf = ia.alloc(4096)
            lmr = ia.lmr_create(MemType.VIRTUAL, buf, 4096, pz, MemPriv.ALL)
            ep.connect(b.address, 778, WAIT_US)
            wait_event(evd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
            remote = json.loads(proc.stdout.readline())
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            event = wait_event(evd, EventNumber.CONNECTION_EVENT_DISCONNECTED)
            assert event.ep == ep.handle and ep.state == EpState.DISCONNECTED
            # posts on a DISCONNECTED endpoint are accepted, then flushed
            ep.post_rdma_write(
                [lmr.triplet(0, 8)], 3, [remote["address"], 8, remote["rmr_context"]]
            )
            flushed = wait_event(evd, EventNumber.DTO_COMPLETION_EVENT)
            assert (flushed.cookie, flushed.status) == (3, 1)  # DAT_DTO_ERR_FLUSHED
        deadline = time.monotonic() + 5
        while memfds(b.proc.pid, mine):
            assert time.monotonic() < deadline, "the daemon still maps the dead one's segments"
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stdin.close()
