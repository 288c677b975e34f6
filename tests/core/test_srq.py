"""Shared receive queues in the core: the receives posted to an SRQ are consumed in posting
order by whichever of its EPs a message reaches first; a message with no receive waits for one
posted to the SRQ; the low watermark event comes once per dat_srq_set_lw; an EP that leaves
its connection gives back nothing of the SRQ and says so on the async EVD; dat_srq_free and
dat_srq_resize refuse what the spec says they refuse."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from client.core import Event
from proto.constants import DatReturnSubtype as Sub
from proto.constants import DtoCompletionStatus as St
from proto.constants import (
    Dtos,
    EvdFlags,
    EventNumber,
    MemPriv,
    MemType,
    SrqAsyncErrorReason,
    SrqState,
)
from proto.errors import (
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
)
from proto.frames import FrameType
from proto.hostif import ASYNC_EVD, Opcode, write_wqe
from tests.core.flows import Side, add_rule, connect, side
from tests.core.harness import Fabric, SimConsumer

OK = St.DTO_SUCCESS


class SrqSide:
    """A consumer whose EPs take their receives from one SRQ."""

    def __init__(self, fabric: Fabric, eps: int, max_recv_dtos: int = 8) -> None:
        node = fabric.add_node("srq")
        self.fabric, self.node = fabric, node
        self.c = c = fabric.add_consumer(node)
        core = c.core
        self.pz = c.call(core.pz_create())
        self.evd = c.call(core.evd_create(256, EvdFlags.DEFAULT))
        self.srq = c.call(core.srq_create(self.pz, max_recv_dtos, 2, 0))
        self.address = c.alloc(4096)
        self.lmr = c.call(
            core.lmr_create(MemType.VIRTUAL, self.address, 4096, self.pz, MemPriv.ALL, c.locate)
        )
        self.eps = [
            c.call(core.ep_create_with_srq(self.pz, self.evd, self.evd, self.evd, self.srq, None))
            for _ in range(eps)
        ]

    def side(self, i: int) -> Side:
        """Side i of the flows (one of the SRQ's EPs, the shared EVD and memory)."""
        return Side(self.c, self.pz, self.evd, self.eps[i], self.address, 4096, self.lmr)

    def post(self, cookie: int, offset: int, length: int = 64) -> None:
        """dat_srq_post_recv of [offset, +length) of the memory."""
        doorbell = self.c.core.srq_post_recv(
            self.srq, [[self.address + offset, length, self.lmr.lmr_context]], cookie
        )
        if doorbell:
            self.c.send(doorbell)
        self.fabric.run()

    def received(self) -> list[tuple[int, int, int, St]]:
        """(ep, cookie, length, status) of the receive completions taken off the EVD."""
        return [
            (e.ep, e.cookie, e.transfered_length, St(e.status))
            for e in self.c.events(self.evd)
            if e.operation in (Dtos.RECEIVE, Dtos.IB_RECV_IMMED)
        ]

    def asyncs(self) -> list[Event]:
        return self.c.events(ASYNC_EVD)

    def memory(self, offset: int, length: int) -> bytes:
        return bytes(self.c.view(self.address + offset, length))


def _setup(eps: int = 2, **kw: int) -> tuple[Fabric, SrqSide, list[Side]]:
    """An SRQ side with ``eps`` EPs, each connected to a sender on a node of its own."""
    fabric = Fabric()
    s = SrqSide(fabric, eps, **kw)
    senders = []
    for i in range(eps):
        a = side(fabric, fabric.add_node(f"a{i}"))
        connect(fabric, a, s.side(i), conn_qual=100 + i)
        senders.append(a)
    return fabric, s, senders


def _send(a: Side, text: bytes, cookie: int = 1) -> None:
    a.memory(0, len(text))[:] = text
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, len(text))], cookie, None, 0)
    a.c.fabric.run()


def test_receives_are_taken_in_posting_order_by_whichever_ep_a_message_reaches() -> None:
    _fabric, s, (a0, a1) = _setup()
    for cookie in range(4):
        s.post(cookie, 64 * cookie)
    _send(a1, b"one")
    _send(a0, b"two")
    _send(a1, b"three")
    assert s.received() == [
        (s.eps[1], 0, 3, OK),
        (s.eps[0], 1, 3, OK),
        (s.eps[1], 2, 5, OK),
    ]
    assert (s.memory(0, 3), s.memory(64, 3), s.memory(128, 5)) == (b"one", b"two", b"three")
    q = s.c.core.srq(s.srq).param(None)
    assert (q["available_dto_count"], q["outstanding_dto_count"]) == (1, 1)


def test_a_message_without_a_receive_waits_for_one_posted_to_the_srq() -> None:
    _fabric, s, (a0, _) = _setup()
    _send(a0, b"early", 7)
    assert s.received() == [] and a0.events() == []
    s.post(42, 256)
    assert s.received() == [(s.eps[0], 42, 5, OK)]
    assert [e.cookie for e in a0.events()] == [7]


def test_a_write_with_immediate_data_consumes_a_receive_of_the_srq() -> None:
    fabric, s, (a0, _) = _setup()
    s.post(5, 0, 0)
    target = [s.address + 1024, 16, s.lmr.rmr_context]
    a0.c.post(Dtos.IB_RDMA_WRITE_IMMED, a0.ep, [a0.triplet(0, 16)], 1, target, 0, (9, 0))
    fabric.run()
    [got] = [e for e in s.c.events(s.evd) if e.event_number == EventNumber.IB_DTO_EVENT]
    assert (got.ep, got.cookie, got.immed_data) == (s.eps[0], 5, 9)


def test_a_receive_completion_reaped_after_its_ep_was_freed_still_frees_the_srq() -> None:
    """The completion entry names the SRQ: handing it out counts the receive as reaped though
    its EP is gone (a Send's and a Write with immediate data's)."""
    fabric, s, (a0, _) = _setup()
    s.post(1, 0)
    s.post(2, 64, 0)
    _send(a0, b"gone", 11)
    target = [s.address + 1024, 16, s.lmr.rmr_context]
    a0.c.post(Dtos.IB_RDMA_WRITE_IMMED, a0.ep, [a0.triplet(0, 16)], 12, target, 0, (9, 0))
    fabric.run()

    def counts() -> tuple[int, int]:
        q = s.c.core.srq(s.srq).param(None)
        return q["available_dto_count"], q["outstanding_dto_count"]

    assert counts() == (0, 2)
    s.c.call(s.c.core.ep_free(s.eps[0]))
    events = [e for e in s.c.events(s.evd) if e.operation in (Dtos.RECEIVE, Dtos.IB_RECV_IMMED)]
    assert [(e.ep, e.cookie) for e in events] == [(s.eps[0], 1), (s.eps[0], 2)]
    assert events[1].immed_data == 9
    assert counts() == (0, 0)


def test_the_low_watermark_event_comes_once_per_setting() -> None:
    _fabric, s, (a0, _) = _setup()
    for cookie in range(4):
        s.post(cookie, 64 * cookie)
    s.c.call(s.c.core.srq_set_lw(s.srq, 2))
    assert s.asyncs() == []
    _send(a0, b"x")
    _send(a0, b"y")
    assert s.asyncs() == [], "two left: not below the watermark"
    _send(a0, b"z")
    [event] = s.asyncs()
    assert (event.handle, event.reason) == (s.srq, SrqAsyncErrorReason.LOW_WATERMARK_EVENT)
    _send(a0, b"w")
    assert s.asyncs() == [], "once per setting"
    s.c.call(s.c.core.srq_set_lw(s.srq, 1))
    [event] = s.asyncs()
    assert event.handle == s.srq, "already below: the event comes during the call"


def test_a_batch_of_sends_takes_the_srqs_receives_as_single_sends_do() -> None:
    """Sends posted in one turn travel as one SENDS frame: each takes the next receive of
    the SRQ, the watermark event comes once, and handing the completions out frees the SRQ."""
    fabric, s, (a0, _) = _setup()
    for cookie in range(5):
        s.post(cookie, 64 * cookie)
    s.c.call(s.c.core.srq_set_lw(s.srq, 2))
    for i in range(4):  # the first leaves alone (it rings the doorbell), three together
        a0.memory(16 * i, 4)[:] = b"msg" + bytes([48 + i])
        a0.c.post(Dtos.SEND, a0.ep, [a0.triplet(16 * i, 4)], i, None, 0)
    fabric.run()
    assert [fields for _, _, fields in fabric.frames(FrameType.SENDS)] == [[1, [4]], [2, [4, 4, 4]]]
    assert s.received() == [(s.eps[0], i, 4, OK) for i in range(4)]
    assert [s.memory(64 * i, 4) for i in range(4)] == [b"msg" + bytes([48 + i]) for i in range(4)]
    [event] = s.asyncs()
    assert (event.handle, event.reason) == (s.srq, SrqAsyncErrorReason.LOW_WATERMARK_EVENT)
    q = s.c.core.srq(s.srq).param(None)
    assert (q["available_dto_count"], q["outstanding_dto_count"]) == (1, 1)


def test_an_ep_that_leaves_gives_back_nothing_of_the_srq_and_says_so() -> None:
    fabric, s, (_a0, a1) = _setup()
    for cookie in range(2):
        s.post(cookie, 64 * cookie)
    s.c.call(s.c.core.ep_disconnect(s.eps[0], 1))  # abrupt
    fabric.run()
    numbers = [e.event_number for e in s.c.events(s.evd)]
    assert EventNumber.CONNECTION_EVENT_DISCONNECTED in numbers
    assert not any(n == EventNumber.DTO_COMPLETION_EVENT for n in numbers), "nothing flushed"
    [event] = s.asyncs()
    assert (event.event_number, event.handle) == (EventNumber.ASYNC_ERROR_EP_BROKEN, s.eps[0])
    _send(a1, b"still")
    assert s.received() == [(s.eps[1], 0, 5, OK)]


def test_srq_free_is_refused_while_an_ep_uses_it() -> None:
    fabric = Fabric()
    s = SrqSide(fabric, 1)
    with pytest.raises(DatInvalidState) as refused:
        s.c.call(s.c.core.srq_free(s.srq))
    assert refused.value.subtype == Sub.INVALID_STATE_SRQ_IN_USE
    s.c.call(s.c.core.ep_free(s.eps[0]))
    s.c.call(s.c.core.srq_free(s.srq))
    with pytest.raises(DatInvalidHandle):
        s.c.core.srq_post_recv(s.srq, [], 1)


def test_a_receive_posted_to_an_ep_of_an_srq_is_refused() -> None:
    fabric = Fabric()
    s = SrqSide(fabric, 1)
    with pytest.raises(DatInvalidState):
        s.c.post(Dtos.RECEIVE, s.eps[0], [[s.address, 8, s.lmr.lmr_context]], 1, None, 0)


def test_resize_refuses_below_the_outstanding_receives_and_the_watermark() -> None:
    _fabric, s, (a0, _) = _setup(max_recv_dtos=4)
    for cookie in range(3):
        s.post(cookie, 64 * cookie)
    _send(a0, b"x")
    core = s.c.core
    with pytest.raises(DatInvalidState):
        core.srq_resize(s.srq, 2)  # three outstanding: one reaped completion still counts
    s.received()
    core.srq_resize(s.srq, 2)  # the completion was reaped: two left
    s.c.call(core.srq_set_lw(s.srq, 2))
    with pytest.raises(DatInvalidState):
        core.srq_resize(s.srq, 1)
    with pytest.raises(DatInsufficientResources):
        s.post(9, 512)


def test_create_argument_errors() -> None:
    fabric = Fabric()
    s = SrqSide(fabric, 0)
    core = s.c.core
    with pytest.raises(DatInvalidParameter):
        s.c.call(core.srq_create(s.pz, 4, 1, 5))  # low watermark past max_recv_dtos
    with pytest.raises(DatInvalidHandle) as bad_pz:
        s.c.call(core.srq_create(999, 4, 1, 0))
    assert bad_pz.value.subtype == Sub.INVALID_HANDLE_PZ
    other_pz = s.c.call(core.pz_create())
    with pytest.raises(DatInvalidParameter):
        s.c.call(core.ep_create_with_srq(other_pz, s.evd, s.evd, s.evd, s.srq, None))


def test_a_receive_the_daemon_cannot_use_puts_the_srq_in_error() -> None:
    fabric = Fabric()
    s = SrqSide(fabric, 1)
    ring = s.c.core.srq(s.srq).ring
    write_wqe(ring, Opcode.RECEIVE, 0, 1, [[s.address, 8, 0xBAD]])
    ring.publish()
    s.c.send(s.c.core.kick())
    fabric.run()
    [event] = s.asyncs()
    assert (event.handle, event.reason) == (s.srq, SrqAsyncErrorReason.TRANSFER_TO_ERROR)
    q = s.c.core.srq(s.srq).param(None)
    assert (q["srq_state"], q["available_dto_count"]) == (SrqState.ERROR, 0)
    s.post(2, 0)  # dat_srq_post_recv is valid in every SRQ state


def test_garbage_in_the_srq_ring_closes_only_that_ia() -> None:
    fabric = Fabric()
    s = SrqSide(fabric, 1)
    bystander = SimConsumer(fabric, s.node, "bystander")
    ring = s.c.core.srq(s.srq).ring
    write_wqe(ring, Opcode.SEND, 0, 1, [[s.address, 8, s.lmr.lmr_context]])
    ring.publish()
    s.c.send(s.c.core.kick())
    fabric.run()
    assert "does not belong" in s.c.closed_for
    assert bystander.call(bystander.core.pz_create())


def test_two_messages_landing_at_once_on_two_eps_take_two_receives() -> None:
    """Each stream delivers a Send's header and half its payload, then the rest: the second
    Send starts landing before the first is done, and must land in the next receive, not in
    the first one again."""
    fabric, s, (a0, a1) = _setup()
    s.post(1, 0, 1024)
    s.post(2, 1024, 1024)
    for a in (a0, a1):
        pipe = fabric.pipe(a.c.node, s.node)
        whole = pipe.deliver

        def halves(data: bytes, whole: Callable[[bytes], None] = whole) -> None:
            whole(data[: len(data) // 2])
            fabric.call_soon(lambda: whole(data[len(data) // 2 :]))

        pipe.deliver = halves
    for a, fill in ((a0, b"A"), (a1, b"B")):
        a.memory(0, 512)[:] = fill * 512
        a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 512)], 9, None, 0)
    fabric.run()
    got = s.received()
    assert sorted((cookie, length) for _, cookie, length, _ in got) == [(1, 512), (2, 512)]
    landed = {s.memory(0, 512), s.memory(1024, 512)}
    assert landed == {b"A" * 512, b"B" * 512}, "each message in a receive of its own"


@pytest.mark.parametrize("framing", ["SEND", "SENDS"])
def test_a_message_that_never_finishes_consumes_no_receive_of_the_others(framing: str) -> None:
    """The sender's node dies with half a Send landed. Alone in a SEND frame (as a Send
    travels while fault rules are installed on its node: here one that matches nothing), it
    took its receive as its bytes began to land: that receive completes on the EP, FLUSHED,
    once. In a SENDS frame (a small Send's usual way) it takes a receive only once all its
    bytes are there: none is taken. Either way the SRQ's other receive stays for the other
    EP."""
    fabric, s, (a0, a1) = _setup()
    s.post(1, 0, 1024)
    s.post(2, 1024, 1024)
    if framing == "SEND":
        add_rule(a0.c, action="delay", op="RDMA_READ", delay_ms=1)
    pipe = fabric.pipe(a0.c.node, s.node)
    whole = pipe.deliver

    def half_then_crash(data: bytes) -> None:
        whole(data[: len(data) // 2])
        a0.c.node.crash()

    pipe.deliver = half_then_crash
    a0.memory(0, 512)[:] = b"A" * 512
    a0.c.post(Dtos.SEND, a0.ep, [a0.triplet(0, 512)], 9, None, 0)
    fabric.run()
    fabric.advance(5.0)
    assert [name for _, _, name, _, _ in fabric.trace if name.startswith("SEND")] == [framing]
    if framing == "SEND":
        assert s.received() == [(s.eps[0], 1, 0, St.DTO_ERR_FLUSHED)]
        _send(a1, b"later")
        assert s.received() == [(s.eps[1], 2, 5, OK)]
    else:
        assert s.received() == []
        _send(a1, b"later")
        assert s.received() == [(s.eps[1], 1, 5, OK)]
