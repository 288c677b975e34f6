"""The daemon's own checks of a request WQE (dat_ep_post_send / _rdma_write / _rdma_read), for a
consumer that writes its send queue past the library: a WQE failing them completes with
DTO_ERR_LOCAL_PROTECTION at once, the connection breaks and the peer is told (it sees
DISCONNECTED, not a broken stream); a WQE on an endpoint that cannot carry it completes with
DTO_ERR_LOCAL_EP. Each local privilege is the one the operation needs, no more."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, MemPriv, MemType
from proto.constants import EventNumber as E
from proto.frames import FrameType
from proto.hostif import Opcode, write_wqe
from tests.core.flows import Side, add_rule, connect, pair, side
from tests.core.harness import Fabric

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
Segment = tuple[int, int, int]


def _forge(s: Side, opcode: Opcode, cookie: int, local: Segment, remote: Segment) -> None:
    """A WQE written straight into the send queue (no library check), then the kick."""
    sq, _ = s.c.core.queues(s.c.core.eps[s.ep])
    write_wqe(sq, opcode, 0, cookie, [local], remote)
    sq.publish()
    s.c.send(s.c.core.kick())


def _remote(s: Side, length: int) -> Segment:
    """An RMR triplet of the first ``length`` bytes of the side's memory."""
    return (s.address, length, s.lmr.rmr_context)


def _lmr(s: Side, offset: int, length: int, privileges: MemPriv) -> Segment:
    """A second LMR over [offset, offset+length) of the side's memory: its local triplet."""
    info = s.c.call(
        s.c.core.lmr_create(
            MemType.VIRTUAL, s.address + offset, length, s.pz, privileges, s.c.locate
        )
    )
    return (s.address + offset, length, info.lmr_context)


BAD_LOCAL: dict[str, Callable[[Side, Side], Segment]] = {
    "another consumer's lmr_context": lambda a, b: (b.address, 64, b.lmr.lmr_context),
    "a segment one byte past its LMR": lambda a, b: (
        a.address + a.size - 63,
        64,
        a.lmr.lmr_context,
    ),
    "no LMR at all": lambda a, b: (a.address, 64, 0xDEAD),
}


@pytest.mark.parametrize("opcode", [Opcode.RDMA_WRITE, Opcode.RDMA_READ, Opcode.SEND])
@pytest.mark.parametrize("bad", sorted(BAD_LOCAL))
def test_a_failed_local_check_breaks_the_connection_and_tells_the_peer(
    bad: str, opcode: Opcode
) -> None:
    """dat_ep_post_*: LOCAL_PROTECTION, BROKEN here; the peer gets DISCONNECT, so DISCONNECTED
    (and its receive flushed), not the BROKEN of a stream that just ended."""
    fabric, a, b = pair()
    b.memory()[:] = b"b" * b.size
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 64)], 7, None, 0)
    _forge(a, opcode, 3, BAD_LOCAL[bad](a, b), _remote(b, 64))
    fabric.run()
    assert a.log() == [(DTO, 3, St.DTO_ERR_LOCAL_PROTECTION, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b""), (DTO, 7, St.DTO_ERR_FLUSHED, 0)]
    assert [(src, dst) for src, dst, _ in fabric.frames(FrameType.DISCONNECT)] == [("n1", "n2")]
    assert bytes(b.memory()) == b"b" * b.size, "nothing moved"


def test_a_failed_local_check_in_disconnect_pending_breaks_and_flushes_the_rest() -> None:
    """dat_ep_post_rdma_write past the library while a graceful disconnect waits: the bad WQE
    fails at once, the connection breaks, the peer is told; completions keep posting order:
    the write it waited for FLUSHED, then the bad one with its error."""
    fabric, a, b = pair()
    add_rule(b.c, action="delay", op="ACK", delay_ms=100.0)  # b's ACKs arrive 0.1 s late
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], 1, b.rmr(0, 16), 0)
    a.c.call(a.c.core.ep_disconnect(a.ep, 1))
    assert a.log() == []
    _forge(a, Opcode.RDMA_WRITE, 2, (b.address, 16, b.lmr.lmr_context), _remote(b, 16))
    fabric.run()
    assert a.log() == [
        (E.CONNECTION_EVENT_BROKEN, b""),
        (DTO, 1, St.DTO_ERR_FLUSHED, 0),
        (DTO, 2, St.DTO_ERR_LOCAL_PROTECTION, 0),
    ]
    fabric.advance(1.0)
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b"")]
    assert a.log() == []


@pytest.mark.parametrize(
    ("opcode", "privileges"),
    [
        (Opcode.RDMA_READ, MemPriv.LOCAL_READ | MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE),
        (Opcode.RDMA_WRITE, MemPriv.LOCAL_WRITE | MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE),
        (Opcode.SEND, MemPriv.LOCAL_WRITE),
    ],
    ids=["read-into-no-local-write", "write-from-no-local-read", "send-from-no-local-read"],
)
def test_a_local_buffer_without_the_privilege_the_operation_needs(
    opcode: Opcode, privileges: MemPriv
) -> None:
    """dat_ep_post_rdma_read needs LOCAL_WRITE on its local buffer, _rdma_write and _send
    LOCAL_READ: without it, LOCAL_PROTECTION and nothing lands on either side."""
    fabric, a, b = pair()
    local = _lmr(a, 1024, 64, privileges)
    a.memory()[:] = b"a" * a.size
    b.memory()[:] = b"b" * b.size
    _forge(a, opcode, 4, local, _remote(b, 64))
    fabric.run()
    assert a.log() == [(DTO, 4, St.DTO_ERR_LOCAL_PROTECTION, 0), (E.CONNECTION_EVENT_BROKEN, b"")]
    assert bytes(a.memory()) == b"a" * a.size and bytes(b.memory()) == b"b" * b.size


@pytest.mark.parametrize(
    ("op", "privileges"),
    [(Dtos.RDMA_READ, MemPriv.LOCAL_WRITE), (Dtos.RDMA_WRITE, MemPriv.LOCAL_READ)],
    ids=["read-into-local-write-only", "write-from-local-read-only"],
)
def test_the_one_local_privilege_an_operation_needs_is_enough(
    op: Dtos, privileges: MemPriv
) -> None:
    """dat_ep_post_rdma_read into a LOCAL_WRITE-only LMR, _rdma_write from a LOCAL_READ-only
    one: both succeed and move their bytes."""
    fabric, a, b = pair()
    local = _lmr(a, 1024, 64, privileges)
    a.memory(1024, 64)[:] = b"A" * 64
    b.memory(0, 64)[:] = b"B" * 64
    a.c.post(op, a.ep, [list(local)], 5, b.rmr(0, 64), 0)
    fabric.run()
    assert a.log() == [(DTO, 5, OK, 64)]
    moved = bytes(a.memory(1024, 64)) if op == Dtos.RDMA_READ else bytes(b.memory(0, 64))
    assert moved == (b"B" if op == Dtos.RDMA_READ else b"A") * 64


def test_a_request_forged_on_an_unconnected_endpoint_is_a_local_ep_error() -> None:
    """dat_ep_post_rdma_write on an UNCONNECTED EP, past the library's DAT_INVALID_STATE:
    the daemon completes it with DTO_ERR_LOCAL_EP; no connection event, nothing sent."""
    fabric = Fabric()
    a = side(fabric, fabric.add_node("n1"))
    _forge(a, Opcode.RDMA_WRITE, 6, (a.address, 64, a.lmr.lmr_context), (a.address, 64, 1))
    fabric.run()
    assert a.log() == [(DTO, 6, St.DTO_ERR_LOCAL_EP, 0)]
    assert fabric.trace == []
    b = side(fabric, fabric.add_node("n2"))
    connect(fabric, a, b)  # the EP stayed UNCONNECTED: it connects


def test_a_request_forged_in_disconnect_pending_fails_alone() -> None:
    """dat_ep_post_rdma_write past the library (or racing dat_ep_disconnect) while a graceful
    disconnect waits: that WQE alone completes with DTO_ERR_LOCAL_EP; the write it waited for
    executed, and completes successfully when its ACK comes, then DISCONNECTED."""
    fabric, a, b = pair()
    add_rule(b.c, action="delay", op="ACK", delay_ms=100.0)  # b's ACKs arrive 0.1 s late
    a.memory(0, 16)[:] = b"written before.."
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], 1, b.rmr(0, 16), 0)
    a.c.call(a.c.core.ep_disconnect(a.ep, 1))
    _forge(a, Opcode.RDMA_WRITE, 2, (a.address, 16, a.lmr.lmr_context), _remote(b, 16))
    fabric.run()
    assert a.log() == [(DTO, 2, St.DTO_ERR_LOCAL_EP, 0)]
    assert bytes(b.memory(0, 16)) == b"written before.."
    fabric.advance(0.1)
    assert a.log() == [(DTO, 1, OK, 16), (E.CONNECTION_EVENT_DISCONNECTED, b"")]
    assert b.log() == [(E.CONNECTION_EVENT_DISCONNECTED, b"")]
    assert [fields[0] for _, _, fields in fabric.frames(FrameType.WRITE)] == [1], "2 never left"


def test_a_request_forged_on_an_unconnected_endpoint_leaves_its_receives() -> None:
    """dat_ep_post_send past the library on an UNCONNECTED EP with a receive posted: the send
    fails alone (DTO_ERR_LOCAL_EP); the receive stays and takes the first message once the EP
    is connected."""
    fabric = Fabric()
    a, b = side(fabric, fabric.add_node("n1")), side(fabric, fabric.add_node("n2"))
    a.c.post(Dtos.RECEIVE, a.ep, [a.triplet(0, 16)], 9, None, 0)
    _forge(a, Opcode.SEND, 6, (a.address + 64, 8, a.lmr.lmr_context), (0, 0, 0))
    fabric.run()
    assert a.log() == [(DTO, 6, St.DTO_ERR_LOCAL_EP, 0)]
    connect(fabric, a, b)
    b.memory(0, 5)[:] = b"hello"
    b.c.post(Dtos.SEND, b.ep, [b.triplet(0, 5)], 1, None, 0)
    fabric.run()
    assert a.log() == [(DTO, 9, OK, 5)]
    assert bytes(a.memory(0, 5)) == b"hello"
