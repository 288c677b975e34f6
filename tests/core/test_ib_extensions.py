"""The IB extensions in the core (dat_ib_extensions.h): fetch-and-add and compare-and-swap run
at the target daemon once each, whatever the wire does to them, and return the original value;
an RDMA Write with immediate data lands its bytes and completes a receive with the immediate,
in RC order; privilege, alignment and length rules give the errors the extension defines."""

from __future__ import annotations

import pytest

from client.records import Event
from proto.attrs import EpAttr
from proto.constants import CompletionFlags, Dtos, IbExtType, MemPriv
from proto.constants import DatReturnSubtype as Sub
from proto.constants import DtoCompletionStatus as St
from proto.constants import EventNumber as E
from proto.errors import DatInvalidParameter, DatLengthError, DatPrivilegesViolation
from proto.frames import FrameType
from proto.hostif import Opcode, write_wqe
from tests.core.flows import Side, add_rule, connect, fault_log, side
from tests.core.harness import Fabric

ATOMIC = MemPriv.ALL | MemPriv.REMOTE_ATOMIC
OK = St.DTO_SUCCESS


def _pair(privileges: MemPriv = ATOMIC, **attr: int) -> tuple[Fabric, Side, Side]:
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    ep_attr = EpAttr(**attr) if attr else None
    a = side(fabric, n1, attr=ep_attr, privileges=privileges)
    b = side(fabric, n2, attr=ep_attr, privileges=privileges)
    connect(fabric, a, b)
    return fabric, a, b


def _u64(s: Side, offset: int) -> int:
    return int.from_bytes(s.memory(offset, 8), "little")


def _set_u64(s: Side, offset: int, value: int) -> None:
    s.memory(offset, 8)[:] = value.to_bytes(8, "little")


def _triple(t: list[int]) -> tuple[int, int, int]:
    return t[0], t[1], t[2]


def _brief(e: Event) -> tuple[object, ...]:
    return e.event_number, e.operation, e.ext_type, e.cookie, St(e.status), e.transfered_length


def test_fetch_and_add_returns_the_original_and_adds_modulo_2_64() -> None:
    fabric, a, b = _pair()
    _set_u64(b, 64, 2**64 - 2)
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(8, 8)], 5, b.rmr(64, 8), 0, (3, 0))
    fabric.run()
    [done] = a.events()
    assert _brief(done) == (E.IB_DTO_EVENT, Dtos.IB_FETCH_ADD, IbExtType.FETCH_AND_ADD, 5, OK, 8)
    assert (_u64(a, 8), _u64(b, 64)) == (2**64 - 2, 1)
    assert b.events() == [], "an atomic tells the target's consumer nothing"


def test_an_atomics_answer_acknowledges_it_and_the_write_before_it() -> None:
    """The ATOMIC_RESP is the only answer (no ACK follows it), and it says every earlier
    request executed: the Write before it completes with it, though the Write's ACK was
    lost."""
    fabric, a, b = _pair()
    add_rule(b.c, action="blackhole", op="ACK", count=1)
    _set_u64(a, 16, 7)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(16, 8)], 1, b.rmr(64, 8), 0)
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(8, 8)], 2, b.rmr(64, 8), 0, (1, 0))
    fabric.run()
    assert [(e.cookie, St(e.status)) for e in a.events()] == [(1, OK), (2, OK)]
    assert (_u64(a, 8), _u64(b, 64)) == (7, 8), "the atomic saw the Write"
    assert list(fabric.frames(FrameType.ATOMIC_RESP)) == [("n2", "n1", [2, 7])]
    assert list(fabric.frames(FrameType.ACK)) == []


@pytest.mark.parametrize(("compare", "after"), [(0x12345, 0x98765), (0x654321, 0x12345)])
def test_cmp_and_swap_swaps_only_on_a_match_and_returns_the_original(
    compare: int, after: int
) -> None:
    fabric, a, b = _pair()
    _set_u64(b, 0, 0x12345)
    a.c.post(Dtos.IB_CMP_SWAP, a.ep, [a.triplet(0, 8)], 6, b.rmr(0, 256), 0, (0x98765, compare))
    fabric.run()
    [done] = a.events()
    assert _brief(done) == (E.IB_DTO_EVENT, Dtos.IB_CMP_SWAP, IbExtType.CMP_AND_SWAP, 6, OK, 8)
    assert (_u64(a, 0), _u64(b, 0)) == (0x12345, after)


def test_an_atomic_on_memory_without_remote_atomic_is_a_remote_access_error() -> None:
    fabric, a, b = _pair(MemPriv.ALL)
    _set_u64(b, 0, 7)
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0, (1, 0))
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 2, b.rmr(8, 8), 0)
    fabric.run()
    failed, broken, flushed = a.events()
    assert (failed.cookie, St(failed.status)) == (1, St.DTO_ERR_REMOTE_ACCESS)
    assert broken.event_number == E.CONNECTION_EVENT_BROKEN
    assert (flushed.cookie, St(flushed.status)) == (2, St.DTO_ERR_FLUSHED)
    assert _u64(b, 0) == 7


def test_the_target_refuses_a_misaligned_atomic_a_driver_let_through() -> None:
    fabric, a, b = _pair()
    sq, _ = a.c.core.queues(a.c.core.eps[a.ep])
    write_wqe(sq, Opcode.FETCH_ADD, 0, 9, [a.triplet(0, 8)], _triple(b.rmr(4, 8)), operands=(1, 0))
    sq.publish()
    a.c.send(a.c.core.kick())
    fabric.run()
    failed, broken = a.events()
    assert (failed.cookie, St(failed.status)) == (9, St.DTO_ERR_REMOTE_ACCESS)
    assert broken.event_number == E.CONNECTION_EVENT_BROKEN
    assert bytes(b.memory(0, 16)) == bytes(16)


def test_an_atomic_whose_local_buffer_is_not_8_bytes_fails_locally_in_the_daemon() -> None:
    fabric, a, b = _pair()
    sq, _ = a.c.core.queues(a.c.core.eps[a.ep])
    write_wqe(sq, Opcode.CMP_SWAP, 0, 9, [a.triplet(0, 16)], _triple(b.rmr(0, 8)), operands=(1, 0))
    sq.publish()
    a.c.send(a.c.core.kick())
    fabric.run()
    failed, _ = a.events()
    assert (failed.cookie, St(failed.status)) == (9, St.DTO_ERR_LOCAL_LENGTH)
    assert not list(fabric.frames(FrameType.ATOMIC))


@pytest.mark.parametrize(
    ("kind", "local", "remote", "operands", "error", "subtype"),
    [
        (Dtos.IB_FETCH_ADD, (0, 16), (0, 8), (1, 0), DatLengthError, Sub.NO_SUBTYPE),
        (Dtos.IB_FETCH_ADD, (0, 8), (0, 4), (1, 0), DatLengthError, Sub.NO_SUBTYPE),
        (Dtos.IB_FETCH_ADD, (0, 8), (4, 8), (1, 0), DatInvalidParameter, Sub.INVALID_ARG5),
        (Dtos.IB_CMP_SWAP, (0, 8), (12, 8), (1, 2), DatInvalidParameter, Sub.INVALID_ARG6),
        (Dtos.IB_FETCH_ADD, (0, 8), (0, 8), (2**64, 0), DatInvalidParameter, Sub.INVALID_ARG2),
        (Dtos.IB_CMP_SWAP, (0, 8), (0, 8), (1, -1), DatInvalidParameter, Sub.INVALID_ARG2),
        (Dtos.IB_CMP_SWAP, (0, 8), (0, 8), (-1, 1), DatInvalidParameter, Sub.INVALID_ARG3),
        (Dtos.IB_CMP_SWAP, (4090, 8), (0, 8), (1, 1), DatInvalidParameter, Sub.INVALID_ARG4),
        (
            Dtos.IB_RDMA_WRITE_IMMED,
            (0, 8),
            (0, 8),
            (2**32, 0),
            DatInvalidParameter,
            Sub.INVALID_ARG6,
        ),
    ],
    ids=[
        "local 16 bytes",
        "remote 4 bytes",
        "remote misaligned",
        "remote misaligned (cmp)",
        "add past u64",
        "compare negative",
        "swap negative",
        "local outside its LMR (cmp)",
        "immediate past u32",
    ],
)
def test_post_argument_errors(
    kind: Dtos,
    local: tuple[int, int],
    remote: tuple[int, int],
    operands: tuple[int, int],
    error: type[Exception],
    subtype: Sub,
) -> None:
    fabric, a, b = _pair()
    with pytest.raises(error) as raised:
        a.c.post(kind, a.ep, [a.triplet(*local)], 1, b.rmr(*remote), 0, operands)
    assert getattr(raised.value, "subtype", Sub.NO_SUBTYPE) == subtype
    fabric.run()
    assert a.events() == [] and not list(fabric.frames(FrameType.ATOMIC))


def test_an_atomic_needs_local_write_on_its_buffer() -> None:
    fabric = Fabric()
    a = side(fabric, fabric.add_node("n1"), privileges=MemPriv.LOCAL_READ)
    b = side(fabric, fabric.add_node("n2"), privileges=ATOMIC)
    connect(fabric, a, b)
    with pytest.raises(DatPrivilegesViolation):
        a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0, (1, 0))


@pytest.mark.parametrize("action", ["duplicate", "drop"])
def test_an_atomic_the_wire_repeats_or_loses_runs_once(action: str) -> None:
    fabric, a, b = _pair()
    add_rule(a.c, action=action, op="ATOMIC", count=1)
    for cookie in range(3):
        a.c.post(
            Dtos.IB_FETCH_ADD, a.ep, [a.triplet(8 * cookie, 8)], cookie, b.rmr(0, 8), 0, (5, 0)
        )
    fabric.run()
    assert [(e.cookie, St(e.status)) for e in a.events()] == [(0, OK), (1, OK), (2, OK)]
    assert _u64(b, 0) == 15
    assert [_u64(a, 8 * i) for i in range(3)] == [0, 5, 10]


def test_a_lost_answer_is_sent_again_not_run_again() -> None:
    fabric, a, b = _pair()
    add_rule(b.c, action="drop", op="ATOMIC_RESP", count=2)
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0, (1, 0))
    fabric.run()
    [done] = a.events()
    assert (St(done.status), _u64(a, 0), _u64(b, 0)) == (OK, 0, 1)


def test_atomics_take_read_credits() -> None:
    fabric, a, b = _pair(max_rdma_read_out=1, max_rdma_read_in=1)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(64, 8)], 1, b.rmr(0, 8), 0)
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(0, 8)], 2, b.rmr(0, 8), 0, (1, 0))
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(8, 8)], 3, b.rmr(0, 8), 0, (1, 0))
    fabric.run()
    assert [(e.cookie, St(e.status)) for e in a.events()] == [(1, OK), (2, OK), (3, OK)]
    trace = [
        name
        for _, _, name, _, _ in fabric.trace
        if name in ("READ_REQ", "READ_RESP", "ATOMIC", "ATOMIC_RESP")
    ]
    assert trace == ["READ_REQ", "READ_RESP", "ATOMIC", "ATOMIC_RESP", "ATOMIC", "ATOMIC_RESP"]


def test_a_fenced_write_waits_for_an_atomic() -> None:
    fabric, a, b = _pair()
    add_rule(b.c, action="delay", op="ATOMIC_RESP", delay_ms=50)
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0, (1, 0))
    a.memory(64, 8)[:] = b"\x01" * 8
    fenced = int(CompletionFlags.BARRIER_FENCE)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(64, 8)], 2, b.rmr(0, 8), fenced)
    fabric.run()
    assert a.events() == [] and bytes(b.memory(0, 8)) == b"\x01" + bytes(7), "the add ran alone"
    fabric.advance(0.1)
    assert [e.cookie for e in a.events()] == [1, 2]
    assert (_u64(a, 0), bytes(b.memory(0, 8))) == (0, b"\x01" * 8)


def test_write_with_immediate_lands_and_completes_a_receive_with_the_immediate() -> None:
    fabric, a, b = _pair()
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(2048, 0)], 40, None, 0)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(2048, 16)], 41, None, 0)
    a.memory(0, 256)[:] = bytes(range(256))
    a.c.post(
        Dtos.IB_RDMA_WRITE_IMMED, a.ep, [a.triplet(0, 256)], 7, b.rmr(512, 256), 0, (0x7777, 0)
    )
    fabric.run()
    [done] = a.events()
    w = IbExtType.RDMA_WRITE_IMMED
    assert _brief(done) == (E.IB_DTO_EVENT, Dtos.IB_RDMA_WRITE_IMMED, w, 7, OK, 256)
    [got] = b.events()
    r = IbExtType.RDMA_WRITE_IMMED_DATA
    assert _brief(got) == (E.IB_DTO_EVENT, Dtos.IB_RECV_IMMED, r, 40, OK, 256)
    assert got.immed_data == 0x7777
    assert bytes(b.memory(512, 256)) == bytes(range(256))
    assert b.c.core.eps[b.ep].recvs == 1, "one receive consumed, the other still posted"


def test_write_with_immediate_waits_for_a_receive_and_what_follows_waits_behind_it() -> None:
    fabric, a, b = _pair()
    a.memory(0, 8)[:] = b"AAAAAAAA"
    a.c.post(Dtos.IB_RDMA_WRITE_IMMED, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0, (1, 0))
    a.memory(8, 8)[:] = b"BBBBBBBB"
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(8, 8)], 2, b.rmr(0, 8), 0)
    fabric.run()
    assert a.events() == [] and bytes(b.memory(0, 8)) == bytes(8)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(64, 8)], 3, None, 0)
    fabric.run()
    assert [e.cookie for e in a.events()] == [1, 2]
    [got] = b.events()
    assert (got.cookie, got.immed_data) == (3, 1)
    assert bytes(b.memory(0, 8)) == b"BBBBBBBB", "the later Write landed after the first"


def test_write_with_immediate_refused_at_the_target_consumes_no_receive() -> None:
    fabric, a, b = _pair()
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 8)], 3, None, 0)
    a.c.post(Dtos.IB_RDMA_WRITE_IMMED, a.ep, [a.triplet(0, 8)], 1, [1 << 40, 8, 12345], 0, (1, 0))
    fabric.run()
    failed, _ = a.events()
    assert (failed.cookie, St(failed.status)) == (1, St.DTO_ERR_REMOTE_ACCESS)
    got = b.events()
    assert [(e.cookie, e.operation, St(e.status)) for e in got if e.cookie == 3] == [
        (3, Dtos.RECEIVE, St.DTO_ERR_FLUSHED)
    ]


def test_a_write_with_immediate_duplicated_on_the_wire_completes_one_receive() -> None:
    fabric, a, b = _pair()
    add_rule(a.c, action="duplicate", op="RDMA_WRITE_IMMED")
    for cookie in (1, 2):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 8)], cookie, None, 0)
    a.c.post(Dtos.IB_RDMA_WRITE_IMMED, a.ep, [a.triplet(0, 8)], 9, b.rmr(64, 8), 0, (5, 0))
    fabric.run()
    assert [e.cookie for e in a.events()] == [9]
    assert [(e.cookie, e.immed_data) for e in b.events()] == [(1, 5)]


def test_a_status_rule_fails_an_atomic_with_its_status_and_runs_nothing() -> None:
    fabric, a, b = _pair()
    add_rule(a.c, action="status", op="ATOMIC", status=int(St.DTO_ERR_REMOTE_RESPONDER))
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0, (1, 0))
    fabric.run()
    failed, broken = a.events()
    assert (failed.cookie, St(failed.status)) == (1, St.DTO_ERR_REMOTE_RESPONDER)
    assert broken.event_number == E.CONNECTION_EVENT_BROKEN
    assert _u64(b, 0) == 0


def test_a_delay_rule_holds_a_write_with_immediate_data() -> None:
    fabric, a, b = _pair()
    add_rule(a.c, action="delay", op="RDMA_WRITE_IMMED", delay_ms=30)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 0)], 2, None, 0)
    a.c.post(Dtos.IB_RDMA_WRITE_IMMED, a.ep, [a.triplet(0, 8)], 1, b.rmr(64, 8), 0, (3, 0))
    fabric.run()
    assert a.events() == [] and b.events() == []
    fabric.advance(0.05)
    assert [e.cookie for e in a.events()] == [1]
    assert [(e.cookie, e.immed_data) for e in b.events()] == [(2, 3)]


def test_a_silent_header_corruption_sends_an_atomic_elsewhere_and_logs_where() -> None:
    fabric, a, b = _pair()
    add_rule(a.c, action="corrupt", op="ATOMIC", silent=True, part="header")
    a.c.post(Dtos.IB_FETCH_ADD, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0, (1, 0))
    fabric.run()
    [entry] = [e for e in fault_log(a.c) if e["action"] == "corrupt"]
    assert entry["address"] != entry["was"] == b.address
    assert _u64(b, 0) == 0, "the word the atomic named is untouched"
