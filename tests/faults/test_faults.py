"""Faults on demand: each completion status and connection event a fault can cause, produced
by a rule; decisions that replay; partitions that heal."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from client.faults import Faults
from fabricd.launch import Node
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.faultrules import RETRY_COUNT, replay_rules
from tests.conftest import StartNode
from tests.integration.flows import Pair, connect_pair, wait_event

FAST = ["--heartbeat-interval", "0.2", "--heartbeat-timeout", "1.0"]


@pytest.fixture
def fabric(start: StartNode) -> Iterator[tuple[Node, Node, Faults]]:
    a, b = start("n1", extra=FAST), start("n2", extra=FAST)
    with Faults({"n1": a.socket, "n2": b.socket}) as faults:
        yield a, b, faults


def _pair(a: Node, b: Node, conn_qual: int = 4000) -> Pair:
    return connect_pair(a.socket, b.socket, b.address, conn_qual=conn_qual)


def _write(p: Pair, cookie: int, n: int = 64, at: int = 0) -> None:
    p.ep_a.post_rdma_write([p.lmr_a.triplet(0, n)], cookie, p.lmr_b.remote(at, n))


def test_dropped_past_the_retry_count_is_a_transport_error(
    fabric: tuple[Node, Node, Faults],
) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        with faults.rule("drop", op="RDMA_WRITE", src="n1", dst="n2"):
            _write(p, 1)
            _write(p, 2)
            error = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
            assert (error.cookie, error.status) == (1, St.DTO_ERR_TRANSPORT)
            assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
            flushed = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
            assert (flushed.cookie, flushed.status) == (2, St.DTO_ERR_FLUSHED)
        drops = [json.loads(line) for line in faults.log("n1")]
        assert len(drops) == RETRY_COUNT + 1 and all(d["action"] == "drop" for d in drops)
        assert {d["seq"] for d in drops} == {1}, "the first write was retried until it failed"
    finally:
        p.close()


def test_occasional_drops_are_retried_and_every_byte_arrives(
    fabric: tuple[Node, Node, Faults],
) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        with faults.rule("drop", probability=0.3, op="RDMA_WRITE", src="n1", dst="n2", seed=7):
            for i in range(40):
                p.view_a[:64] = bytes([i]) * 64
                _write(p, i, at=64 * i)
                assert wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status == St.DTO_SUCCESS
        assert all(bytes(p.view_b[64 * i : 64 * i + 64]) == bytes([i]) * 64 for i in range(40))
        assert faults.log("n1"), "some writes were dropped and retried"
    finally:
        p.close()


def _workload(p: Pair) -> None:
    """Sends and writes in lock step; a duplicated send must be received once."""
    for i in range(30):
        p.ep_b.post_recv([p.lmr_b.triplet(2048, 64)], cookie=i)
        p.ep_a.post_send([p.lmr_a.triplet(0, 8)], cookie=100 + i)
        _write(p, 200 + i)
        for _ in range(2):
            assert wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status == 0
        assert wait_event(p.evd_b, E.DTO_COMPLETION_EVENT).cookie == i
    with pytest.raises(Exception, match="QUEUE_EMPTY"):
        p.evd_b.dequeue()  # no receive completed twice


def _seeded_run(start: StartNode) -> list[str]:
    a, b = start("n1"), start("n2")  # the same names each run: they are in the log
    with Faults({"n1": a.socket, "n2": b.socket}) as faults:
        p = _pair(a, b)
        try:
            faults.add("drop", probability=0.25, op="ANY", src="n1", seed=7, name="flaky")
            faults.add("duplicate", probability=0.2, op="SEND", src="n1", name="twice")
            _workload(p)
            return faults.log("n1")
        finally:
            p.close()
            a.stop()
            b.stop()


def test_same_seed_same_rules_same_workload_same_log(start: StartNode) -> None:
    first = _seeded_run(start)
    second = _seeded_run(start)
    assert first and "\n".join(first) == "\n".join(second), "the fault log replays byte for byte"


def test_a_replayed_log_fires_the_same_faults(start: StartNode) -> None:
    first = _seeded_run(start)
    a, b = start("n1"), start("n2")
    with Faults({"n1": a.socket, "n2": b.socket}) as faults:
        p = _pair(a, b)
        try:
            faults.install([r.to_json() for r in replay_rules(first)])
            _workload(p)
            replayed = [json.loads(x) for x in faults.log("n1")]
        finally:
            p.close()
    original = [json.loads(x) for x in first]
    key = ("action", "link", "connection", "message", "op", "seq")
    assert [[r[k] for k in key] for r in replayed] == [[o[k] for k in key] for o in original]


@pytest.mark.parametrize(
    "status",
    [
        St.DTO_ERR_REMOTE_RESPONDER,
        St.DTO_ERR_BAD_RESPONSE,
        St.DTO_ERR_LOCAL_LENGTH,
        St.DTO_ERR_REMOTE_ACCESS,
    ],
)
def test_a_forced_completion_status(fabric: tuple[Node, Node, Faults], status: St) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        faults.add("status", status=int(status), op="RDMA_READ", src="n1", count=1)
        p.ep_a.post_rdma_read([p.lmr_a.triplet(0, 8)], 9, p.lmr_b.remote(0, 8))
        done = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
        assert (done.cookie, done.status) == (9, status)
        assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
        assert wait_event(p.evd_b, E.CONNECTION_EVENT_DISCONNECTED).ep == p.ep_b.handle
    finally:
        p.close()


def test_receiver_not_ready(fabric: tuple[Node, Node, Faults]) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        faults.add("rnr", op="SEND", src="n1")
        p.ep_b.post_recv([p.lmr_b.triplet(0, 64)], cookie=1)
        p.ep_a.post_send([p.lmr_a.triplet(0, 8)], cookie=2)
        done = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
        assert (done.cookie, done.status) == (2, St.DTO_ERR_RECEIVER_NOT_READY)
        assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
    finally:
        p.close()


def test_a_revoked_rmr_context_is_a_remote_access_error(
    fabric: tuple[Node, Node, Faults],
) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        _write(p, 1)
        assert wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status == 0
        faults.revoke("n2", p.lmr_b.rmr_context)
        _write(p, 2)
        done = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
        assert (done.cookie, done.status) == (2, St.DTO_ERR_REMOTE_ACCESS)
        assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
    finally:
        p.close()


def test_corruption_detected_never_lands_silent_does_and_the_log_says_where(
    fabric: tuple[Node, Node, Faults],
) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        p.view_a[:256] = bytes(range(256))
        faults.add("corrupt", op="RDMA_WRITE", src="n1", count=1, name="crc")
        _write(p, 1, n=256)
        assert wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status == 0
        assert bytes(p.view_b[:256]) == bytes(range(256)), "detected: retried, intact"
        faults.add("corrupt", op="RDMA_WRITE", src="n1", count=1, silent=True, name="bitrot")
        _write(p, 2, n=256, at=1024)
        assert wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status == 0
        landed = bytes(p.view_b[1024:1280])
        wrong = [i for i in range(256) if landed[i] != i]
        entry = json.loads(faults.log("n1")[-1])
        assert entry["rule"] == "bitrot" and wrong == [entry["offset"]]
        assert bytes(p.view_a[:256]) == bytes(range(256)), "the sender's memory is untouched"
    finally:
        p.close()


def test_a_delayed_write_still_lands_in_order(fabric: tuple[Node, Node, Faults]) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        faults.add("delay", delay_ms=200, jitter_ms=50, op="RDMA_WRITE", src="n1", nth=1)
        p.view_a[:8] = b"AAAAAAAA"
        _write(p, 1, n=8)
        p.view_a[64:72] = b"BBBBBBBB"
        p.ep_a.post_rdma_write([p.lmr_a.triplet(64, 8)], 2, p.lmr_b.remote(0, 8))
        done = [wait_event(p.evd_a, E.DTO_COMPLETION_EVENT) for _ in range(2)]
        assert [(d.cookie, d.status) for d in done] == [(1, 0), (2, 0)]
        assert bytes(p.view_b[:8]) == b"BBBBBBBB", "the later write did not overtake"
    finally:
        p.close()


@pytest.mark.parametrize("mode", ["blackhole", "reset"])
def test_a_partition_breaks_connections_and_heals(
    fabric: tuple[Node, Node, Faults], mode: str
) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        faults.partition([["n1"], ["n2"]], mode=mode)
        _write(p, 1)
        error = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
        assert error.status in (St.DTO_ERR_TRANSPORT, St.DTO_ERR_FLUSHED)
        assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
        ep = p.ia_a.ep_create(p.ia_a.pz_create(), p.evd_a, p.evd_a, p.evd_a)
        ep.connect(b.address, 4001, 1_500_000)
        expected = (
            E.CONNECTION_EVENT_TIMED_OUT
            if mode == "blackhole"
            else (E.CONNECTION_EVENT_UNREACHABLE)
        )
        assert wait_event(p.evd_a, expected).ep == ep.handle
        assert faults.heal() == 0
        assert faults.rules() == {"n1": [], "n2": []}
    finally:
        p.close()
    healed = _pair(a, b, conn_qual=4002)
    try:
        _write(healed, 5)
        assert wait_event(healed.evd_a, E.DTO_COMPLETION_EVENT).status == 0
    finally:
        healed.close()


def test_a_crashed_node_breaks_what_it_carried(fabric: tuple[Node, Node, Faults]) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        faults.crash("n2")
        b.proc.wait(10)
        _write(p, 1)
        assert wait_event(p.evd_a, E.CONNECTION_EVENT_BROKEN).ep == p.ep_a.handle
    finally:
        p.ia_a.close()


def test_clear_leaves_zero_rules(fabric: tuple[Node, Node, Faults]) -> None:
    _, _, faults = fabric
    faults.add("delay", delay_ms=1, name="one")
    faults.add("drop", probability=0.01, src="n1", name="two")
    assert sorted(r["name"] for r in faults.rules()["n1"]) == ["one", "two"]
    assert faults.clear() == 0
    assert faults.rules() == {"n1": [], "n2": []}


def test_a_silently_corrupted_header_misplaces_the_write_and_the_log_says_where(
    fabric: tuple[Node, Node, Faults],
) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        p.view_a[:16] = b"misplaced bytes!"
        faults.add("corrupt", part="header", silent=True, op="RDMA_WRITE", src="n1", count=1)
        _write(p, 1, n=16, at=1024)
        done = wait_event(p.evd_a, E.DTO_COMPLETION_EVENT)
        entry = json.loads(faults.log("n1")[-1])
        moved = entry["address"] - entry["was"]
        assert moved != 0
        if done.status == St.DTO_SUCCESS:
            at = 1024 + moved
            assert bytes(p.view_b[at : at + 16]) == b"misplaced bytes!", "landed where logged"
            assert bytes(p.view_b[1024:1040]) != b"misplaced bytes!"
        else:  # the flipped address fell outside the LMR: refused
            assert done.status == St.DTO_ERR_REMOTE_ACCESS
    finally:
        p.close()


def test_a_paused_node_serves_nothing_until_resumed(fabric: tuple[Node, Node, Faults]) -> None:
    a, b, faults = fabric
    p = _pair(a, b)
    try:
        pid = int(faults.status("n2")["pid"])
        faults.pause("n2")
        _write(p, 1)
        with pytest.raises(Exception, match="TIMEOUT"):
            p.evd_a.wait(300_000)
        faults.resume("n2", pid)
        assert wait_event(p.evd_a, E.DTO_COMPLETION_EVENT).status == St.DTO_SUCCESS
    finally:
        p.close()
