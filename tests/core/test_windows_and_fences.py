"""RMR binds execute in posting order on their EP; rebinding and freeing end the old key;
BARRIER_FENCE and read credits hold later requests; the target refuses more incoming RDMA Reads
than max_rdma_read_in."""

from __future__ import annotations

import pytest

from proto.attrs import EpAttr
from proto.constants import CompletionFlags, Dtos, MemPriv
from proto.constants import DatReturnSubtype as Sub
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.errors import DatInvalidState
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, connect, pair, side
from tests.core.harness import Fabric, inject

DTO, BIND = E.DTO_COMPLETION_EVENT, E.RMR_BIND_COMPLETION_EVENT
OK = St.DTO_SUCCESS
RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE


def _bind(s: Side, rmr: int, at: int, n: int, cookie: int, flags: int = 0, run: bool = True) -> int:
    """Bind ``rmr`` to [at, at+n) of the side's LMR on its EP; the new key."""
    core = s.c.core
    key: int = s.c.call(
        core.rmr_bind(rmr, s.lmr.handle, s.triplet(at, n), RW, s.ep, cookie, flags), run=run
    )
    return key


def _write(a: Side, cookie: int, remote: list[int], data: bytes) -> None:
    a.memory(0, len(data))[:] = data
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, len(data))], cookie, remote, 0)


def test_a_bind_takes_effect_where_it_was_posted() -> None:
    """b's rebind waits (fenced) behind b's own RDMA Read: until it executes the old key works
    and the new one does not work yet; from then on the new one works and the old one fails."""
    fabric, a, b = pair()
    rmr = b.c.call(b.c.core.rmr_create(b.pz))
    old = _bind(b, rmr, 0, 64, 1)
    assert b.log() == [(BIND, 1, OK)]
    add_rule(b.c, action="delay", op="RDMA_READ", delay_ms=100.0)  # b's read leaves late
    b.c.post(Dtos.RDMA_READ, b.ep, [b.triplet(3000, 8)], 2, a.rmr(0, 8), 0)
    new = _bind(b, rmr, 64, 64, 3, CompletionFlags.BARRIER_FENCE)
    assert new not in (0, old)
    fabric.run()
    assert b.log() == [], "the bind waits for the read before it"
    _write(a, 10, [b.address, 8, old], b"old key!")  # before the bind executes
    fabric.run()
    assert bytes(b.memory(0, 8)) == b"old key!"
    fabric.advance(0.1)  # the read goes and is answered, the bind executes
    assert a.log() == [(DTO, 10, OK, 8)]  # its ACK queued behind b's delayed read
    assert b.log() == [(DTO, 2, OK, 8), (BIND, 3, OK)]
    _write(a, 11, [b.address + 64, 8, new], b"new key!")
    fabric.run()
    fabric.advance(0.1)
    assert a.log() == [(DTO, 11, OK, 8)]
    assert bytes(b.memory(64, 8)) == b"new key!"
    _write(a, 12, [b.address, 8, old], b"too late")
    fabric.run()
    fabric.advance(0.1)
    assert a.log() == [(DTO, 12, St.DTO_ERR_REMOTE_ACCESS, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(b.memory(0, 8)) == b"old key!"


def test_the_new_key_does_not_work_before_the_bind_executes() -> None:
    fabric, a, b = pair()
    rmr = b.c.call(b.c.core.rmr_create(b.pz))
    add_rule(b.c, action="delay", op="RDMA_READ", delay_ms=100.0)
    b.c.post(Dtos.RDMA_READ, b.ep, [b.triplet(3000, 8)], 2, a.rmr(0, 8), 0)
    new = _bind(b, rmr, 0, 64, 3, CompletionFlags.BARRIER_FENCE)
    _write(a, 10, [b.address, 8, new], b"too soon")
    fabric.run()
    assert bytes(b.memory(0, 8)) == bytes(8)
    assert b.log() == [
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 2, St.DTO_ERR_FLUSHED, 0),
        (BIND, 3, St.DTO_ERR_FLUSHED),
    ]
    assert new not in b.c.node.nic.memory.by_rmr_context, "a flushed bind never binds"
    fabric.advance(0.1)  # the NAK waited behind b's delayed read; the stream's end behind it
    assert a.log() == [(DTO, 10, St.DTO_ERR_REMOTE_ACCESS, 0), (E.CONNECTION_EVENT_BROKEN, b"")]


def test_rebinding_moves_the_window_and_freeing_ends_it() -> None:
    fabric, a, b = pair()
    core = b.c.core
    rmr = b.c.call(core.rmr_create(b.pz))
    first = _bind(b, rmr, 0, 64, 1)
    second = _bind(b, rmr, 128, 64, 2)
    assert b.log() == [(BIND, 1, OK), (BIND, 2, OK)]
    _write(a, 1, [b.address + 128, 8, second], b"rebound!")
    fabric.run()
    assert a.log() == [(DTO, 1, OK, 8)] and bytes(b.memory(128, 8)) == b"rebound!"
    with pytest.raises(DatInvalidState) as in_use:
        b.c.call(core.lmr_free(b.lmr.handle))
    assert in_use.value.code == DatInvalidState(Sub.INVALID_STATE_LMR_IN_USE).code
    memory = b.c.node.nic.memory
    assert first not in memory.by_rmr_context and second in memory.by_rmr_context
    b.c.call(core.rmr_free(rmr))
    assert second not in memory.by_rmr_context
    _write(a, 2, [b.address + 128, 8, second], b"freed!!!")
    fabric.run()
    assert a.log() == [(DTO, 2, St.DTO_ERR_REMOTE_ACCESS, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(b.memory(128, 8)) == b"rebound!"


def test_the_old_key_fails_after_a_rebind() -> None:
    fabric, a, b = pair()
    rmr = b.c.call(b.c.core.rmr_create(b.pz))
    first = _bind(b, rmr, 0, 64, 1)
    _bind(b, rmr, 128, 64, 2)
    b.log()
    _write(a, 1, [b.address, 8, first], b"stale!!!")
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_ERR_REMOTE_ACCESS, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(b.memory(0, 8)) == bytes(8)


def test_a_zero_length_bind_unbinds() -> None:
    _fabric, _a, b = pair()
    rmr = b.c.call(b.c.core.rmr_create(b.pz))
    key = _bind(b, rmr, 0, 64, 1)
    assert _bind(b, rmr, 0, 0, 2) == 0
    assert b.log() == [(BIND, 1, OK), (BIND, 2, OK)]
    assert key not in b.c.node.nic.memory.by_rmr_context
    b.c.call(b.c.core.lmr_free(b.lmr.handle))  # nothing is bound to it any more


# -- fences and read credits -----------------------------------------------------------------


def _sent(fabric: Fabric, kind: FrameType) -> list[list[object]]:
    return [fields for _, _, fields in fabric.frames(kind)]


def test_barrier_fence_holds_later_requests_until_earlier_reads_complete() -> None:
    fabric, a, b = pair()
    b.memory(0, 8)[:] = b"original"
    add_rule(b.c, action="delay", op="READ_RESP", delay_ms=100.0)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(512, 8)], 1, b.rmr(0, 8), 0)
    a.memory(0, 8)[:] = b"replaced"
    a.c.post(
        Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 2, b.rmr(0, 8), CompletionFlags.BARRIER_FENCE
    )
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 8)], 3, None, 0)  # behind the fenced write
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(1024, 8)], 4, None, 0)
    fabric.run()
    fabric.advance(0.099)
    assert _sent(fabric, FrameType.WRITE) == [] and _sent(fabric, FrameType.SENDS) == []
    assert bytes(b.memory(0, 8)) == b"original"
    assert a.log() == []
    fabric.advance(0.001)
    assert bytes(a.memory(512, 8)) == b"original", "the read saw the bytes before the write"
    assert bytes(b.memory(0, 8)) == b"replaced"
    assert a.log() == [(DTO, 1, OK, 8), (DTO, 2, OK, 8), (DTO, 3, OK, 8)]
    assert b.log() == [(DTO, 4, OK, 8)]
    kinds = [name for src, _, name, _, _ in fabric.trace if src == "n1" and name != "HELLO"]
    assert kinds[-3:] == ["READ_REQ", "WRITE", "SENDS"]


def test_without_a_fence_a_write_does_not_wait_for_a_read() -> None:
    fabric, a, b = pair()
    add_rule(b.c, action="delay", op="READ_RESP", delay_ms=100.0)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(512, 8)], 1, b.rmr(0, 8), 0)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 2, b.rmr(8, 8), 0)
    fabric.run()
    assert _sent(fabric, FrameType.WRITE) == [[2, b.address + 8, b.lmr.rmr_context]]
    assert a.log() == [], "its completion still waits for the read before it"
    fabric.advance(0.1)
    assert a.log() == [(DTO, 1, OK, 8), (DTO, 2, OK, 8)]


def _pair_with(attr_a: EpAttr, attr_b: EpAttr) -> tuple[Fabric, Side, Side]:
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    a, b = side(fabric, n1, attr=attr_a), side(fabric, n2, attr=attr_b)
    connect(fabric, a, b)
    return fabric, a, b


def test_read_credits_hold_the_next_read() -> None:
    fabric, a, b = _pair_with(EpAttr(max_rdma_read_out=2), EpAttr())
    b.memory(0, 24)[:] = b"first...second..third..."
    add_rule(b.c, action="delay", op="READ_RESP", delay_ms=100.0)
    for i in range(3):
        a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(8 * i, 8)], i, b.rmr(8 * i, 8), 0)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(100, 8)], 3, b.rmr(100, 8), 0)  # posted later
    fabric.run()
    assert [f[0] for f in _sent(fabric, FrameType.READ_REQ)] == [1, 2]
    assert _sent(fabric, FrameType.WRITE) == [], "a later request waits behind the held read"
    fabric.advance(0.1)  # the first response frees a credit: the third read goes
    assert [f[0] for f in _sent(fabric, FrameType.READ_REQ)] == [1, 2, 3]
    assert [f[4] for f in _sent(fabric, FrameType.READ_REQ)] == [0, 0, 1], "reads_done"
    assert a.log() == [(DTO, 0, OK, 8), (DTO, 1, OK, 8)]
    fabric.advance(0.1)
    assert a.log() == [(DTO, 2, OK, 8), (DTO, 3, OK, 8)]
    assert bytes(a.memory(0, 24)) == b"first...second..third..."


def test_the_target_breaks_the_connection_past_max_rdma_read_in() -> None:
    fabric, a, b = _pair_with(EpAttr(max_rdma_read_out=4), EpAttr(max_rdma_read_in=1))
    for i in range(3):
        a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(8 * i, 8)], i, b.rmr(8 * i, 8), 0)
    fabric.run()
    assert a.log() == [
        (DTO, 0, OK, 8),
        (DTO, 1, St.DTO_ERR_REMOTE_RESPONDER, 0),
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 2, St.DTO_ERR_FLUSHED, 0),
    ]
    assert b.log() == [(E.CONNECTION_EVENT_BROKEN, b"")]
    assert _sent(fabric, FrameType.NAK) == [[2, St.DTO_ERR_REMOTE_RESPONDER]]


def test_a_forged_read_request_past_max_rdma_read_in_breaks_the_connection() -> None:
    """The target counts what arrives, not what the initiator says it may send."""
    fabric, a, b = _pair_with(EpAttr(max_rdma_read_out=1), EpAttr(max_rdma_read_in=1))
    add_rule(b.c, action="delay", op="READ_RESP", delay_ms=100.0)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0)
    fabric.run()
    forged = [2, b.address, b.lmr.rmr_context, 8, 0]  # claims no response has landed
    inject(fabric.pipe(a.c.node, b.c.node), FrameType.READ_REQ, *forged)
    fabric.run()
    assert b.log() == [(E.CONNECTION_EVENT_BROKEN, b"")]
    assert a.log() == []
    fabric.advance(0.1)  # the response, the ACK, the NAK and the stream's end, in that order
    assert _sent(fabric, FrameType.NAK) == [[2, St.DTO_ERR_REMOTE_RESPONDER]]
    assert a.log() == [(DTO, 1, OK, 8), (E.CONNECTION_EVENT_BROKEN, b"")]
