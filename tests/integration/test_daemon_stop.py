"""A daemon stopped by SIGTERM closes its IAs before it unmaps their memory: each connection
it carried disconnects at the peer (DISCONNECTED, not a broken link), and it exits 0 having
logged no error."""

from __future__ import annotations

from fabricd.launch import Node
from proto.constants import EpState, EventNumber
from tests.integration.flows import connect_pair, wait_event


def test_a_daemon_stopped_by_sigterm_disconnects_its_peers_and_logs_no_error(
    two_nodes: tuple[Node, Node],
) -> None:
    a, b = two_nodes
    pair = connect_pair(a.socket, b.socket, b.address)
    try:
        assert b.stop() == 0
        event = wait_event(pair.evd_a, EventNumber.CONNECTION_EVENT_DISCONNECTED)
        assert event.ep == pair.ep_a.handle and pair.ep_a.state == EpState.DISCONNECTED
        log = b.log_text()
        assert "the daemon is stopping" in log, "its IA and stream were closed, and said so"
        assert "Traceback" not in log and " ERROR " not in log, log
    finally:
        pair.close()
