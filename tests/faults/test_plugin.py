"""The pytest fixtures users load with ``pytest_plugins = ["tools.testing"]``, and time windows."""

from __future__ import annotations

from client.faults import Faults
from fabricd.launch import Node
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from tests.integration.flows import connect_pair, wait_event

pytest_plugins = ["tools.testing"]


def test_one_line_drops_for_a_block(fabric: dict[str, Node], faults: Faults) -> None:
    n1, n2 = fabric["n1"], fabric["n2"]
    pair = connect_pair(n1.socket, n2.socket, n2.address)
    try:
        with faults.rule("drop", probability=0.1, op="RDMA_WRITE", src="n1", dst="n2", seed=7):
            for i in range(50):
                pair.ep_a.post_rdma_write([pair.lmr_a.triplet(0, 8)], i, pair.lmr_b.remote(0, 8))
                assert wait_event(pair.evd_a, E.DTO_COMPLETION_EVENT).status == St.DTO_SUCCESS
        assert faults.log("n1"), "drops happened inside the block (and were retried)"
        assert faults.rules() == {"n1": [], "n2": []}, "the rule ended with the block"
    finally:
        pair.close()


def test_a_rule_fires_only_inside_its_time_window(fabric: dict[str, Node], faults: Faults) -> None:
    n1, n2 = fabric["n1"], fabric["n2"]
    pair = connect_pair(n1.socket, n2.socket, n2.address)
    try:
        faults.add("drop", op="RDMA_WRITE", src="n1", start_s=3600, name="later")
        pair.ep_a.post_rdma_write([pair.lmr_a.triplet(0, 8)], 1, pair.lmr_b.remote(0, 8))
        assert wait_event(pair.evd_a, E.DTO_COMPLETION_EVENT).status == St.DTO_SUCCESS
        assert faults.log("n1") == []
        faults.remove("later")
        faults.add(
            "status",
            status=int(St.DTO_ERR_REMOTE_RESPONDER),
            op="RDMA_WRITE",
            src="n1",
            end_s=3600,
            name="now",
        )
        pair.ep_a.post_rdma_write([pair.lmr_a.triplet(0, 8)], 2, pair.lmr_b.remote(0, 8))
        assert wait_event(pair.evd_a, E.DTO_COMPLETION_EVENT).status == (
            St.DTO_ERR_REMOTE_RESPONDER
        )
    finally:
        pair.close()
