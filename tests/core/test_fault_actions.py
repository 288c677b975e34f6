"""Every fault action through the rule engine (installed with the admin call, as fabricctl and
client.faults do): drop, delay, duplicate, corrupt (detected, silent payload, silent header),
status, rnr, reset, blackhole, bandwidth, and RMR_BIND faults; the fault log replays."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, EpState, MemPriv
from proto.constants import EventNumber as E
from proto.faultrules import RETRY_COUNT, replay_rules
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, address, connect, fault_log, pair, side
from tests.core.harness import Fabric, inject

DTO, BIND = E.DTO_COMPLETION_EVENT, E.RMR_BIND_COMPLETION_EVENT
OK = St.DTO_SUCCESS
BROKEN = (E.CONNECTION_EVENT_BROKEN, b"")
DISCONNECTED = (E.CONNECTION_EVENT_DISCONNECTED, b"")
ERRORS = [s for s in St if s not in (St.DTO_SUCCESS, St.DTO_ERR_FLUSHED)]


def _write(a: Side, b: Side, cookie: int, n: int = 64, at: int = 0, src: int = 0) -> None:
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(src, n)], cookie, b.rmr(at, n), 0)


def _sent(fabric: Fabric, kind: FrameType) -> list[list[Any]]:
    return [fields for _, _, fields in fabric.frames(kind)]


def _entries(c: Any, *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(entry[k] for k in keys) for entry in fault_log(c)]


# -- drop --------------------------------------------------------------------------------------


def test_a_dropped_write_is_retried_and_lands_once() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="drop", op="RDMA_WRITE", count=3)
    a.memory(0, 64)[:] = bytes(range(64))
    _write(a, b, 1)
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 64)]
    assert bytes(b.memory(0, 64)) == bytes(range(64))
    assert _entries(a.c, "action", "op", "seq", "link") == [("drop", "RDMA_WRITE", 1, "n1>n2")] * 3
    messages = [entry["message"] for entry in fault_log(a.c)]
    assert messages == list(range(messages[0], messages[0] + 3)), "each retry is a new message"
    assert _sent(fabric, FrameType.WRITE) == [[1, b.address, b.lmr.rmr_context]]


def test_dropped_past_the_retry_count_is_a_transport_error() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="drop", op="RDMA_WRITE")
    _write(a, b, 1)
    _write(a, b, 2)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_ERR_TRANSPORT, 0), BROKEN, (DTO, 2, St.DTO_ERR_FLUSHED, 0)]
    assert b.log() == [DISCONNECTED]
    assert _entries(a.c, "action", "seq") == [("drop", 1)] * (RETRY_COUNT + 1)
    assert _sent(fabric, FrameType.WRITE) == []


def test_occasional_drops_are_retried_and_every_byte_arrives() -> None:
    fabric, a, b = pair(size=8192)
    add_rule(a.c, seed=7, action="drop", op="RDMA_WRITE", probability=0.3)
    for i in range(40):
        a.memory(64 * i, 64)[:] = bytes([i]) * 64
        _write(a, b, i, at=64 * i, src=64 * i)
        if i % 10 == 9:  # the EP's request queue holds 16
            fabric.run()
    assert a.log() == [(DTO, i, OK, 64) for i in range(40)]
    assert all(bytes(b.memory(64 * i, 64)) == bytes([i]) * 64 for i in range(40))
    drops = fault_log(a.c)
    assert 0 < len(drops) < 40
    assert [f[0] for f in _sent(fabric, FrameType.WRITE)] == list(range(1, 41))


def test_a_dropped_heartbeat_is_lost_not_a_reset() -> None:
    """A heartbeat is not retried: when it is lost, the peer's heartbeat timeout decides."""
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    add_rule(a.c, action="drop", op="HEARTBEAT")
    fabric.advance(4.99)  # n1's heartbeats vanish from 2.0 on; n2 last heard n1 at 0
    assert a.log() == [] and b.log() == []
    assert [src for src, _, _ in fabric.frames(FrameType.HEARTBEAT)] == ["n2"] * 3
    fabric.advance(0.01)
    assert b.log() == [BROKEN] and a.log() == [BROKEN]


# -- delay -------------------------------------------------------------------------------------


def test_a_delayed_write_arrives_after_the_delay_and_keeps_its_order() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="delay", op="RDMA_WRITE", delay_ms=200.0, nth=1)
    a.memory(0, 8)[:] = b"AAAAAAAA"
    a.memory(64, 8)[:] = b"BBBBBBBB"
    _write(a, b, 1, n=8)
    _write(a, b, 2, n=8, src=64)  # not delayed itself, but queued behind the first
    fabric.run()
    fabric.advance(0.199)
    assert bytes(b.memory(0, 8)) == bytes(8) and a.log() == []
    assert _sent(fabric, FrameType.WRITE) == []
    fabric.advance(0.001)
    assert a.log() == [(DTO, 1, OK, 8), (DTO, 2, OK, 8)]
    assert bytes(b.memory(0, 8)) == b"BBBBBBBB", "the later write did not overtake"
    assert [f[0] for f in _sent(fabric, FrameType.WRITE)] == [1, 2]
    assert _entries(a.c, "action", "seq") == [("delay", 1)]


def test_the_end_of_a_stream_does_not_overtake_delayed_frames() -> None:
    """b's ACK is delayed and b disconnects at once: a still gets the ACK first, then the
    DISCONNECT, and its write completes (not TRANSPORT, not FLUSHED)."""
    fabric, a, b = pair()
    add_rule(b.c, action="delay", op="ACK", delay_ms=100.0)
    _write(a, b, 1)
    fabric.run()
    b.c.call(b.c.core.ep_disconnect(b.ep, 0))  # ABRUPT
    assert b.log() == [DISCONNECTED]
    fabric.advance(0.099)
    assert a.log() == []
    fabric.advance(0.001)
    assert a.log() == [(DTO, 1, OK, 64), DISCONNECTED]


def test_clearing_the_rules_releases_what_a_delay_holds() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="delay", op="RDMA_WRITE", delay_ms=60_000.0)
    _write(a, b, 1)
    fabric.run()
    assert a.log() == []
    assert a.c.admin("fault_clear", []) == (0,)
    assert a.log() == [(DTO, 1, OK, 64)]


# -- duplicate ---------------------------------------------------------------------------------


def test_a_duplicated_write_executes_once() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="duplicate", op="RDMA_WRITE")
    a.memory(0, 64)[:] = bytes(range(64))
    _write(a, b, 1)
    fabric.run()
    assert _sent(fabric, FrameType.WRITE) == [[1, b.address, b.lmr.rmr_context]] * 2
    assert _sent(fabric, FrameType.ACK) == [[1]]
    assert a.log() == [(DTO, 1, OK, 64)]
    assert bytes(b.memory(0, 64)) == bytes(range(64))


def test_a_duplicate_whose_bytes_changed_in_between_is_answered_not_executed() -> None:
    """RC executes a message once: the same sequence number arriving again (a late duplicate,
    carrying what the source buffer holds now) is acknowledged again and lands nothing."""
    fabric, a, b = pair()
    a.memory(0, 64)[:] = b"A" * 64
    _write(a, b, 1)
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 64)]
    a.memory(0, 64)[:] = b"B" * 64
    inject(
        fabric.pipe(a.c.node, b.c.node),
        FrameType.WRITE,
        1,
        b.address,
        b.lmr.rmr_context,
        payload=bytes(a.memory(0, 64)),
    )
    fabric.run()
    assert bytes(b.memory(0, 64)) == b"A" * 64
    assert _sent(fabric, FrameType.ACK) == [[1], [1]], "the duplicate is answered again"
    assert a.log() == [] and b.log() == []
    _write(a, b, 2, at=64)  # and the connection goes on: the next message executes
    fabric.run()
    assert a.log() == [(DTO, 2, OK, 64)]
    assert bytes(b.memory(64, 64)) == b"B" * 64


def test_a_duplicated_send_consumes_one_receive() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="duplicate", op="SEND", count=1)
    for cookie in (1, 2):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(64 * cookie, 64)], cookie, None, 0)
    a.memory(0, 5)[:] = b"first"
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 5)], 10, None, 0)
    fabric.run()
    assert _sent(fabric, FrameType.SEND) == [[1], [1]]
    assert b.log() == [(DTO, 1, OK, 5)]
    assert a.log() == [(DTO, 10, OK, 5)]
    a.memory(0, 6)[:] = b"second"
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 6)], 11, None, 0)
    fabric.run()
    assert b.log() == [(DTO, 2, OK, 6)]
    assert bytes(b.memory(64, 5)) == b"first" and bytes(b.memory(128, 6)) == b"second"


# -- corrupt -----------------------------------------------------------------------------------


def test_detected_corruption_is_retried_and_never_lands() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="corrupt", op="RDMA_WRITE", count=1)
    a.memory(0, 256)[:] = bytes(range(256))
    _write(a, b, 1, n=256)
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 256)]
    assert bytes(b.memory(0, 256)) == bytes(range(256))
    [entry] = fault_log(a.c)
    assert (entry["action"], entry["seq"]) == ("corrupt", 1) and "offset" not in entry
    assert len(_sent(fabric, FrameType.WRITE)) == 1, "the corrupted copy counts as lost"


def test_silent_payload_corruption_lands_one_wrong_byte_where_the_log_says() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="corrupt", op="RDMA_WRITE", count=1, silent=True)
    a.memory(0, 256)[:] = bytes(range(256))
    _write(a, b, 1, n=256, at=1024)
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 256)], "silent: nobody noticed"
    [entry] = fault_log(a.c)
    offset = entry["offset"]
    expected = bytearray(range(256))
    expected[offset] ^= 0xFF
    assert bytes(b.memory(1024, 256)) == bytes(expected)
    assert bytes(a.memory(0, 256)) == bytes(range(256)), "the sender's memory is untouched"


def test_silent_header_corruption_misplaces_the_write_where_the_log_says() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="corrupt", op="RDMA_WRITE", count=1, silent=True, part="header")
    a.memory(0, 8)[:] = b"misplace"
    _write(a, b, 1, n=8, at=1024)
    fabric.run()
    [entry] = fault_log(a.c)
    assert entry["was"] == b.address + 1024
    moved = entry["address"] - entry["was"]
    assert abs(moved) in {8 << k for k in range(6)}, "one address bit of 3..8 flipped"
    assert a.log() == [(DTO, 1, OK, 8)]
    at = 1024 + moved
    assert bytes(b.memory(at, 8)) == b"misplace", "landed where logged"
    assert bytes(b.memory(1024, 8)) == bytes(8)
    assert _sent(fabric, FrameType.WRITE) == [[1, entry["address"], b.lmr.rmr_context]]


# -- status and rnr ----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ERRORS, ids=lambda s: s.name)
@pytest.mark.parametrize("op", ["RDMA_WRITE", "RDMA_READ", "SEND"])
def test_a_forced_completion_status(status: St, op: str) -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="status", status=int(status), op=op, count=1)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 50, None, 0)
    local, remote = [a.triplet(0, 8)], b.rmr(0, 8)
    a.c.post(Dtos[op], a.ep, local, 1, None if op == "SEND" else remote, 0)
    a.c.post(Dtos.RDMA_WRITE, a.ep, local, 2, remote, 0)
    fabric.run()
    assert a.log() == [(DTO, 1, status, 0), BROKEN, (DTO, 2, St.DTO_ERR_FLUSHED, 0)]
    assert b.log() == [DISCONNECTED, (DTO, 50, St.DTO_ERR_FLUSHED, 0)]
    assert _entries(a.c, "action", "op", "seq") == [("status", op, 1)]
    kind = {"RDMA_WRITE": FrameType.WRITE, "RDMA_READ": FrameType.READ_REQ}.get(op, FrameType.SEND)
    assert _sent(fabric, kind) == [], "never sent"


def test_receiver_not_ready() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="rnr", op="SEND")
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 1, None, 0)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 8)], 2, None, 0)
    fabric.run()
    assert a.log() == [(DTO, 2, St.DTO_ERR_RECEIVER_NOT_READY, 0), BROKEN]
    assert b.log() == [DISCONNECTED, (DTO, 1, St.DTO_ERR_FLUSHED, 0)]


# -- reset -------------------------------------------------------------------------------------


def test_a_reset_breaks_both_ends() -> None:
    fabric, a, b = pair()
    add_rule(a.c, action="reset", op="RDMA_WRITE")
    _write(a, b, 1)
    _write(a, b, 2)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_ERR_TRANSPORT, 0), BROKEN, (DTO, 2, St.DTO_ERR_FLUSHED, 0)]
    assert b.log() == [BROKEN]
    assert _sent(fabric, FrameType.WRITE) == []


def _handshake(fabric: Fabric, a: Side, b: Side) -> None:
    """Connect with a fault in the way (the events are left queued)."""
    b.c.call(b.c.core.psp_create(77, b.evd, 0))
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 77, 5_000_000, b""))
    [request] = b.events()
    b.c.call(b.c.core.cr_accept(request.cr, b.ep, b""))


def test_a_reset_before_rtu_is_an_accept_completion_error() -> None:
    fabric = Fabric()
    a, b = side(fabric, fabric.add_node("n1")), side(fabric, fabric.add_node("n2"))
    add_rule(a.c, action="reset", op="CM", nth=5)  # HELLO, AUTH, AUTH, CONN_REQ, then the RTU
    _handshake(fabric, a, b)
    assert a.log() == [(E.CONNECTION_EVENT_ESTABLISHED, b""), BROKEN]
    assert b.log() == [(E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, b"")]


def test_a_reset_after_hello_is_non_peer_rejected() -> None:
    fabric = Fabric()
    a, b = side(fabric, fabric.add_node("n1")), side(fabric, fabric.add_node("n2"))
    add_rule(b.c, action="reset", op="CM", nth=3)  # n2's HELLO and AUTH go, its accept does not
    _handshake(fabric, a, b)
    assert a.log() == [(E.CONNECTION_EVENT_NON_PEER_REJECTED, b"")]
    assert b.log() == [(E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, b"")]


# -- partitions: blackhole and reset -----------------------------------------------------------


def _partition(a: Side, b: Side, mode: str) -> None:
    """client.faults' partition: a rule on each side towards the other."""
    add_rule(a.c, action=mode, name="to-n2", dst="n2")
    add_rule(b.c, action=mode, name="to-n1", dst="n1")


def test_a_blackhole_silences_the_link_until_the_heartbeat_cuts_it_then_heals() -> None:
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    _partition(a, b, "blackhole")
    _write(a, b, 1)
    fabric.advance(4.99)
    assert a.log() == [] and b.log() == []
    fabric.advance(0.01)
    assert a.log() == [(DTO, 1, St.DTO_ERR_TRANSPORT, 0), BROKEN]
    assert b.log() == [BROKEN]
    fresh = side(fabric, a.c.node)
    fresh.c.call(fresh.c.core.ep_connect(fresh.ep, address(b.c.node), 2, 1_500_000, b""))
    fabric.advance(1.5)
    assert fresh.log() == [(E.CONNECTION_EVENT_TIMED_OUT, b"")]
    for s in (a, b):
        assert s.c.admin("fault_clear", []) == (0,)
    healed, peer = side(fabric, a.c.node), side(fabric, b.c.node)
    connect(fabric, healed, peer, conn_qual=3)
    _write(healed, peer, 5)
    fabric.run()
    assert healed.log() == [(DTO, 5, OK, 64)]


def test_a_reset_partition_refuses_new_connections_as_unreachable() -> None:
    fabric, a, b = pair()
    _partition(a, b, "reset")
    _write(a, b, 1)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_ERR_TRANSPORT, 0), BROKEN]
    assert b.log() == [BROKEN]
    fresh = side(fabric, a.c.node)
    fresh.c.call(fresh.c.core.ep_connect(fresh.ep, address(b.c.node), 2, 1_500_000, b""))
    assert fresh.log() == [(E.CONNECTION_EVENT_UNREACHABLE, b"")]


# -- bandwidth ---------------------------------------------------------------------------------


def test_a_bandwidth_cap_paces_the_writes_and_keeps_order_and_data() -> None:
    fabric, a, b = pair(size=8192)
    add_rule(a.c, action="bandwidth", op="RDMA_WRITE", rate_MBps=1.0)  # 1000 bytes a ms
    for i in range(4):
        a.memory(1000 * i, 1000)[:] = bytes([i + 1]) * 1000
        _write(a, b, i, n=1000, at=1000 * i, src=1000 * i)
    fabric.run()
    assert a.log() == []
    for i in range(4):
        fabric.advance(0.001 if i else 0.0015)  # at 1.5, 2.5, 3.5, 4.5 ms
        assert a.log() == [(DTO, i, OK, 1000)]
        assert bytes(b.memory(1000 * i, 1000)) == bytes([i + 1]) * 1000
        assert bytes(b.memory(1000 * (i + 1), 1)) == bytes(1)
    assert _entries(a.c, "action", "seq", "size") == [("bandwidth", i + 1, 1000) for i in range(4)]


# -- RMR_BIND ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "status"),
    [
        ({"action": "drop"}, St.RMR_OPERATION_FAILED),
        ({"action": "corrupt"}, St.RMR_OPERATION_FAILED),
        ({"action": "status", "status": 7}, St.DTO_ERR_REMOTE_RESPONDER),
    ],
    ids=["drop", "corrupt", "status"],
)
def test_a_bind_that_a_fault_fails(rule: dict[str, Any], status: St) -> None:
    _fabric, a, b = pair()
    add_rule(b.c, op="RMR_BIND", **rule)
    rmr = b.c.call(b.c.core.rmr_create(b.pz))
    triplet = b.triplet(0, 64)
    key = b.c.call(b.c.core.rmr_bind(rmr, b.lmr.handle, triplet, MemPriv.REMOTE_READ, b.ep, 7, 0))
    assert b.log() == [(BIND, 7, status), BROKEN]
    assert a.log() == [DISCONNECTED]
    assert key not in b.c.node.nic.memory.by_rmr_context
    assert _entries(b.c, "action", "op", "size") == [(rule["action"], "RMR_BIND", 64)]
    assert b.c.core.eps[b.ep].state == EpState.DISCONNECTED


def test_a_bind_fault_that_does_not_apply_to_binds_lets_it_execute() -> None:
    _fabric, _a, b = pair()
    add_rule(b.c, action="delay", op="RMR_BIND", delay_ms=100.0)
    rmr = b.c.call(b.c.core.rmr_create(b.pz))
    triplet = b.triplet(0, 64)
    b.c.call(b.c.core.rmr_bind(rmr, b.lmr.handle, triplet, MemPriv.REMOTE_READ, b.ep, 7, 0))
    assert b.log() == [(BIND, 7, OK)]
    assert fault_log(b.c) == []


# -- the log -----------------------------------------------------------------------------------


def _workload(seed: int, rules: list[dict[str, Any]] | None = None) -> list[str]:
    """Sends and writes under seeded random faults (or under ``rules``); n1's fault log."""
    fabric, a, b = pair()
    if rules is None:
        add_rule(a.c, seed=seed, action="drop", probability=0.25, name="flaky")
        add_rule(a.c, action="duplicate", probability=0.2, op="SEND", name="twice")
    else:
        a.c.admin("fault_add", [rules, seed])
    for i in range(30):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(2048, 64)], i, None, 0)
        a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 8)], 100 + i, None, 0)
        _write(a, b, 200 + i)
        fabric.run()
        assert a.log() == [(DTO, 100 + i, OK, 8), (DTO, 200 + i, OK, 64)]
        assert b.log() == [(DTO, i, OK, 8)], "no receive completed twice"
    (lines,) = a.c.admin("fault_log", [False])
    return list(lines)


def test_same_seed_same_rules_same_workload_same_log() -> None:
    first = _workload(7)
    assert first and first == _workload(7), "the fault log replays byte for byte"
    assert _workload(8) != first


def test_a_replayed_log_fires_the_same_faults() -> None:
    first = _workload(7)
    replayed = _workload(0, [r.to_json() for r in replay_rules(first)])
    key = ("action", "link", "connection", "message", "op", "seq")
    assert [[json.loads(r)[k] for k in key] for r in replayed] == [
        [json.loads(o)[k] for k in key] for o in first
    ]
