"""Autocork: while many small Writes are unacknowledged and an ACK is coming, a few more wait
for it and leave with it as one batch (fabricd.nic.cork: CORK_INFLIGHT, CORK_MIN). The
ACKs are held on a slow link here, so the moment between is seen."""

from __future__ import annotations

from fabricd.nic.cork import CORK_INFLIGHT, CORK_MIN
from fabricd.nic.intake import LINGER
from proto.attrs import EpAttr
from proto.batch import WRITE_OP
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos
from proto.constants import EventNumber as E
from tests.core.flows import Side, connect, side
from tests.core.harness import Fabric, Pipe

OK = St.DTO_SUCCESS


def _setup() -> tuple[Fabric, Side, Side, Pipe]:
    """Two connected sides whose EP holds 128 requests; the stream carrying b's ACKs to a."""
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    a = side(fabric, n1, attr=EpAttr(max_request_dtos=128), qlen=256)
    b = side(fabric, n2)
    connect(fabric, a, b)
    return fabric, a, b, fabric.pipe(n2, n1)


def _writes(a: Side, b: Side, first: int, count: int) -> None:
    for cookie in range(first, first + count):
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(cookie, 1)], cookie, b.rmr(cookie, 1), 0)


def _batches(fabric: Fabric) -> list[list[int]]:
    """[first seq, operations] of every WRITE (one) and WRITES frame a sent, in order."""
    out = []
    for src, _, name, fields, _ in fabric.trace:
        if src == "n1" and name == "WRITE":
            out.append([fields[0], 1])
        elif src == "n1" and name == "WRITES":
            out.append([fields[0], len(fields[1]) // WRITE_OP.size])
    return out


def test_a_few_writes_wait_for_the_ack_and_leave_with_it_in_one_batch() -> None:
    fabric, a, b, acks = _setup()
    acks.held = True
    _writes(a, b, 0, CORK_INFLIGHT + 8)
    fabric.run()
    assert _batches(fabric) == [[1, 1], [2, CORK_INFLIGHT + 7]]
    _writes(a, b, CORK_INFLIGHT + 8, 3)
    fabric.run()
    _writes(a, b, CORK_INFLIGHT + 11, 2)
    fabric.run()
    assert len(_batches(fabric)) == 2, "corked: nothing more on the wire before the ACK"
    acks.release()
    fabric.run()
    assert _batches(fabric)[2:] == [[CORK_INFLIGHT + 9, 5]], "the five leave together"
    events = a.log()
    assert events == [(E.DTO_COMPLETION_EVENT, c, OK, 1) for c in range(CORK_INFLIGHT + 13)]


def test_cork_min_writes_waiting_leave_at_once() -> None:
    """Posted while an ACK is coming, they wait in the ring (Intake._linger); when the daemon
    looks (here at the linger's end: the ACK is held) they are CORK_MIN and leave at once."""
    fabric, a, b, acks = _setup()
    acks.held = True
    _writes(a, b, 0, CORK_INFLIGHT + 8)
    fabric.run()
    _writes(a, b, CORK_INFLIGHT + 8, CORK_MIN)
    fabric.advance(LINGER)
    assert _batches(fabric)[2:] == [[CORK_INFLIGHT + 9, CORK_MIN]]


def test_with_few_unacknowledged_nothing_waits() -> None:
    fabric, a, b, acks = _setup()
    acks.held = True
    _writes(a, b, 0, CORK_INFLIGHT - 2)
    fabric.run()
    _writes(a, b, CORK_INFLIGHT - 2, 1)
    fabric.run()
    assert _batches(fabric)[-1] == [CORK_INFLIGHT - 1, 1], "it left alone, at once"


def test_a_write_right_after_a_read_is_not_corked() -> None:
    """The newest request on the wire is an RDMA Read: no ACK is promised for it (its answer
    is a response), so the next Write leaves at once; the ones after that Write wait for its
    ACK as usual."""
    fabric, a, b, acks = _setup()
    acks.held = True
    _writes(a, b, 0, CORK_INFLIGHT + 8)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(100, 8)], 999, b.rmr(200, 8), 0)
    fabric.run()
    _writes(a, b, CORK_INFLIGHT + 8, 1)
    fabric.run()
    assert _batches(fabric)[-1] == [CORK_INFLIGHT + 10, 1], "it left at once"
    _writes(a, b, CORK_INFLIGHT + 9, 2)
    fabric.run()
    assert _batches(fabric)[-1] == [CORK_INFLIGHT + 10, 1], "these two wait for its ACK"
    acks.release()
    fabric.run()
    assert _batches(fabric)[-1] == [CORK_INFLIGHT + 11, 2]
    assert [cookie for _, cookie, _, _ in a.log()] == [
        *range(CORK_INFLIGHT + 8),
        999,
        *range(CORK_INFLIGHT + 8, CORK_INFLIGHT + 11),
    ]
