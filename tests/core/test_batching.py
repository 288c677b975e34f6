"""Small RDMA Writes to one peer travel batched (one WRITES frame: one header listing them, then
their bytes), and every RC rule holds per Write: exact bytes, one cumulative ACK, completions in
posting order, a Write that fails stops the batch there, a duplicate executes nothing twice, and
a malformed batch closes only its stream."""

from __future__ import annotations

from typing import Any

import pytest

from proto.attrs import EpAttr
from proto.batch import MAX_OP_BYTES, MAX_OPS, WRITE_OP
from proto.constants import CompletionFlags, Dtos
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, connect, pair, side
from tests.core.harness import Fabric, inject

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
BROKEN = (E.CONNECTION_EVENT_BROKEN, b"")


def _sent(fabric: Fabric, kind: FrameType) -> list[list[Any]]:
    return [fields for _, _, fields in fabric.frames(kind)]


def _batches(fabric: Fabric) -> list[tuple[int, list[list[int]]]]:
    """(first seq, [[address, rmr_context, length], ...]) of every WRITES frame sent."""
    return [
        (seq, [list(op) for op in WRITE_OP.iter_unpack(ops)])
        for seq, ops in _sent(fabric, FrameType.WRITES)
    ]


def _ops(*writes: tuple[int, int, int]) -> bytes:
    """A WRITES frame's ``ops`` field for these (address, rmr_context, length)."""
    return b"".join(WRITE_OP.pack(*w) for w in writes)


def _write(a: Side, b: Side, cookie: int, n: int = 16, at: int = 0, src: int = 0) -> None:
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(src, n)], cookie, b.rmr(at, n), 0)


def _burst(fabric: Fabric, a: Side, b: Side, count: int, n: int = 16) -> None:
    """One Write that leaves alone (it rings the doorbell), then ``count`` posted in one turn."""
    _write(a, b, 0, n)
    for i in range(1, count + 1):
        a.memory(n * i, n)[:] = bytes([i]) * n
        _write(a, b, i, n, at=n * i, src=n * i)
    fabric.run()


def test_writes_posted_in_one_turn_leave_as_one_frame_and_land_exactly() -> None:
    fabric, a, b = pair()
    b.memory()[:] = b"\xee" * 4096
    _burst(fabric, a, b, 5)
    assert _sent(fabric, FrameType.WRITE) == [[1, b.address, b.lmr.rmr_context]]
    ops = [[b.address + 16 * i, b.lmr.rmr_context, 16] for i in range(1, 6)]
    assert _batches(fabric) == [(2, ops)]
    [(_, _, _, _, payload_len)] = [t for t in fabric.trace if t[2] == "WRITES"]
    assert payload_len == 5 * 16
    for i in range(1, 6):
        assert bytes(b.memory(16 * i, 16)) == bytes([i]) * 16
    assert bytes(b.memory(96, 16)) == b"\xee" * 16, "nothing past the last Write"
    assert _sent(fabric, FrameType.ACK) == [[1], [6]], "one cumulative ACK for the batch"
    assert a.log() == [(DTO, i, OK, 16) for i in range(6)]


def test_a_batch_holds_at_most_max_ops_writes() -> None:
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    a = side(fabric, n1, attr=EpAttr(max_request_dtos=MAX_OPS + 2), qlen=2 * MAX_OPS)
    b = side(fabric, n2)
    connect(fabric, a, b)
    for i in range(MAX_OPS + 2):
        _write(a, b, i, 1, at=i)
    fabric.run()
    assert [len(ops) for _, ops in _batches(fabric)] == [MAX_OPS]
    assert [seq for seq, _, _ in _sent(fabric, FrameType.WRITE)] == [1, MAX_OPS + 2]
    assert [c for _, c, _, _ in a.log()] == list(range(MAX_OPS + 2))


def test_large_writes_reads_sends_and_fences_end_a_batch() -> None:
    fabric, a, b = pair(size=64 * 1024)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 16)], 90, None, 0)
    fabric.run()
    _write(a, b, 0)
    for cookie in (1, 2):
        _write(a, b, cookie, at=16 * cookie)
    _write(a, b, 3, MAX_OP_BYTES + 1, at=4096)  # too large to batch: alone
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 16)], 4, b.rmr(0, 16), 0)
    for cookie in (5, 6):
        _write(a, b, cookie, at=16 * cookie)
    fence = int(CompletionFlags.BARRIER_FENCE)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], 7, b.rmr(112, 16), fence)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 16)], 8, None, 0)
    fabric.run()
    kinds = [name for src, _, name, _, _ in fabric.trace if src == "n1" and name != "HEARTBEAT"]
    i = kinds.index("WRITE")
    # the fenced Write waits for the read, then goes alone, as a WRITE
    assert kinds[i:] == ["WRITE", "WRITES", "WRITE", "READ_REQ", "WRITES", "WRITE", "SENDS"]
    assert [ops for _, ops in _batches(fabric)] == [
        [[b.address + 16 * c, b.lmr.rmr_context, 16] for c in pair_] for pair_ in ((1, 2), (5, 6))
    ]
    assert [c for _, c, _, _ in a.log()] == list(range(9))


@pytest.mark.parametrize("bad", [1, 3, 5], ids=["first", "middle", "last"])
def test_a_write_that_fails_in_a_batch_completes_what_precedes_it_and_lands_nothing_after(
    bad: int,
) -> None:
    fabric, a, b = pair()
    b.memory()[:] = b"\xbb" * 4096
    a.memory()[:] = b"\xaa" * 4096
    _write(a, b, 0, at=1024)  # alone: it rings the doorbell; the five behind it batch
    for i in range(1, 6):
        key = b.lmr.rmr_context + 1 if i == bad else b.lmr.rmr_context
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], i, [b.address + 16 * i, 16, key], 0)
    fabric.run()
    [(seq, ops)] = _batches(fabric)
    assert (seq, len(ops)) == (2, 5)
    assert a.log() == [
        (DTO, 0, OK, 16),
        *[(DTO, i, OK, 16) for i in range(1, bad)],
        (DTO, bad, St.DTO_ERR_REMOTE_ACCESS, 0),
        BROKEN,
        *[(DTO, i, St.DTO_ERR_FLUSHED, 0) for i in range(bad + 1, 6)],
    ]
    assert _sent(fabric, FrameType.NAK) == [[bad + 1, St.DTO_ERR_REMOTE_ACCESS]]
    for i in range(1, 6):
        expected = b"\xaa" if i < bad else b"\xbb"
        assert bytes(b.memory(16 * i, 16)) == expected * 16, f"Write {i}"
    assert b.log() == [BROKEN]


def test_a_duplicated_batch_executes_nothing_again_and_a_partly_seen_one_lands_only_the_rest() -> (
    None
):
    fabric, a, b = pair()
    b.memory()[:] = b"\xbb" * 4096
    a.memory(0, 64)[:] = b"A" * 64
    _burst(fabric, a, b, 2)
    assert a.log() == [(DTO, i, OK, 16) for i in range(3)]
    pipe = fabric.pipe(a.c.node, b.c.node)
    key = b.lmr.rmr_context
    # the same two Writes again, carrying other bytes: answered, not executed
    inject(
        pipe,
        FrameType.WRITES,
        2,
        _ops((b.address + 16, key, 16), (b.address + 32, key, 16)),
        payload=b"C" * 32,
    )
    fabric.run()
    assert bytes(b.memory(16, 32)) == bytes([1]) * 16 + bytes([2]) * 16
    assert _sent(fabric, FrameType.ACK)[-1] == [3]
    assert a.log() == [] and b.log() == []
    # seq 3 seen, seq 4 new: only the second lands (the initiator never sent 4, so the ACK of it
    # then breaks the link at the initiator: a peer must not acknowledge what was never sent)
    inject(
        pipe,
        FrameType.WRITES,
        3,
        _ops((b.address + 32, key, 16), (b.address + 48, key, 16)),
        payload=b"D" * 16 + b"E" * 16,
    )
    fabric.run()
    assert bytes(b.memory(32, 32)) == bytes([2]) * 16 + b"E" * 16
    assert _sent(fabric, FrameType.ACK)[-1] == [4]


BAD_BATCHES: dict[str, tuple[list[Any], bytes]] = {
    "payload longer than the Writes": ([2, _ops((0, 1, 16))], b"x" * 17),
    "payload shorter than the Writes": ([2, _ops((0, 1, 16), (0, 1, 16))], b"x" * 16),
    "no Writes": ([2, b""], b""),
    "a Write cut short": ([2, _ops((0, 1, 16))[:-1]], b"x" * 16),
    "Writes as msgpack arrays (protocol 5)": ([2, [[0, 1, 16]]], b"x" * 16),
    "ops a string": ([2, "x" * WRITE_OP.size], b"x" * 16),
    "ops a map": ([2, {"a": 1}], b""),
    "seq not an int": (["2", _ops((0, 1, 16))], b"x" * 16),
    "seq zero": ([0, _ops((0, 1, 16))], b"x" * 16),
    "too many Writes": ([2, _ops(*[(0, 1, 0)] * (MAX_OPS + 1))], b""),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_a_malformed_batch_closes_its_stream_and_breaks_only_its_connection(case: str) -> None:
    fabric, a, b = pair()
    b.memory()[:] = b"\xbb" * 4096
    fields, payload = BAD_BATCHES[case]
    inject(fabric.pipe(a.c.node, b.c.node), FrameType.WRITES, *fields, payload=payload)
    fabric.run()
    assert bytes(b.memory()) == b"\xbb" * 4096, "nothing landed"
    assert b.log() == [BROKEN] and a.log() == [BROKEN]
    [(src, _, [reason])] = fabric.frames(FrameType.ERROR)
    assert src == "n2" and ("WRITES" in reason or "Write" in reason), reason


def test_no_batching_while_fault_rules_are_installed() -> None:
    """The fault rules match operations one by one: with rules installed, each Write is its own
    frame (a rule that matches no Write changes nothing else)."""
    fabric, a, b = pair()
    add_rule(a.c, action="delay", op="SEND", delay_ms=1)
    _burst(fabric, a, b, 3)
    assert _sent(fabric, FrameType.WRITES) == []
    assert [f[0] for f in _sent(fabric, FrameType.WRITE)] == [1, 2, 3, 4]
    assert a.log() == [(DTO, i, OK, 16) for i in range(4)]
