"""The target's lane for lone RDMA Writes (fabricd/nic/lane.py): after one Write under a key
has passed its checks the long way, the next ones under it land in the lane; a key revoked,
a range outside the key, another frame type or a duplicate leaves it, so each is handled as
it always was. The initiator's lane takes the ACKs that retire them (an ACK of a request never
sent still breaks the link the long way: tests/core/test_batching.py). A read of nothing but
such Writes is answered at once (lane.answer), its ACK through the fault rules as any other."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fabricd.memory import MemoryRegistry
from fabricd.nic import lane
from fabricd.nic.answers import Answers
from fabricd.nic.initiator import Initiator
from fabricd.nic.objects import Ep, Op, PeerLink
from fabricd.nic.target import Target
from proto.codec import DIRECT_LANDING_MIN
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, MemPriv, MemType
from proto.constants import EventNumber as E
from tests.core.flows import Side, add_rule, pair
from tests.core.harness import Fabric

OK = St.DTO_SUCCESS


@pytest.fixture
def laned(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of requests each call of the target's lanes executed (lane.answer, which
    the hub calls through its module: compiled too; these tests post no RDMA Read, so they
    are the lone Writes landed)."""
    counts: list[int] = []
    answer = lane.answer

    def counted(memory: MemoryRegistry, read: Any, link: PeerLink, *rest: Any) -> bool:
        acked = link.acked
        whole = answer(memory, read, link, *rest)
        counts.append(link.acked - acked)
        return whole

    monkeypatch.setattr(lane, "answer", counted)
    yield counts


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The sequence number each read answered at once (lane.answer) acknowledged."""
    acks: list[int] = []
    answer = lane.answer

    def counted(memory: MemoryRegistry, read: Any, link: PeerLink, *rest: Any) -> bool:
        whole = answer(memory, read, link, *rest)
        if whole:
            acks.append(link.acked)
        return whole

    monkeypatch.setattr(lane, "answer", counted)
    yield acks


def _write(fabric: Fabric, a: Side, cookie: int, remote: list[int], fill: int) -> St:
    """One 64 B Write of ``fill`` bytes at window 1: its completion's status (an error's
    connection event after it left aside)."""
    a.memory(0, 64)[:] = bytes([fill]) * 64
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 64)], cookie, remote, 0)
    fabric.run()
    [done] = [e for e in a.events() if e.event_number == E.DTO_COMPLETION_EVENT]
    assert done.cookie == cookie
    return St(done.status)


def test_lone_writes_after_the_first_land_in_the_lane(laned: list[int]) -> None:
    fabric, a, b = pair()
    b.memory()[:] = bytes(4096)
    for i in range(6):
        assert _write(fabric, a, i, b.rmr(64 * i, 64), i + 1) == OK
    assert sum(laned) == 5, "the first Write passed the checks the long way, the rest took the lane"
    for i in range(6):
        assert bytes(b.memory(64 * i, 64)) == bytes([i + 1]) * 64
    assert bytes(b.memory(64 * 6)) == bytes(4096 - 64 * 6)


def test_the_acks_of_lone_writes_take_the_initiators_lane(
    laned: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each Write's ACK retires it through the ACK lane (Initiator.ack, not Answers.acked's
    frame), its completion as before."""
    taken: list[int] = []
    ack = Initiator.ack

    def counted(self: Initiator, ep: Ep, seq: int) -> None:
        taken.append(seq)
        ack(self, ep, seq)

    monkeypatch.setattr(Initiator, "ack", counted)
    monkeypatch.setattr(Answers, "acked", lambda *_: pytest.fail("an ACK took the long way"))
    fabric, a, b = pair()  # its table of frame handlers takes the one above
    for i in range(4):
        assert _write(fabric, a, i, b.rmr(64 * i, 64), i + 1) == OK
    assert taken == [1, 2, 3, 4] and sum(laned) == 3


def test_a_read_that_starts_with_another_frame_acknowledges_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ACK lane hands on an ACK only when it took one: a read that starts with an RDMA
    Read's response (the Read lane's) calls no Initiator.ack, and each call moves ``acked``."""
    moves: list[tuple[int, int]] = []
    ack = Initiator.ack

    def counted(self: Initiator, ep: Ep, seq: int) -> None:
        moves.append((ep.acked, seq))
        ack(self, ep, seq)

    monkeypatch.setattr(Initiator, "ack", counted)
    fabric, a, b = pair()
    assert _write(fabric, a, 1, b.rmr(0, 64), 1) == OK
    for cookie in (2, 3):
        a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 64)], cookie, b.rmr(0, 64), 0)
        fabric.run()
        assert [(e.cookie, e.status) for e in a.events()] == [(cookie, OK)]
    assert moves and all(before < seq for before, seq in moves), moves


def _read(fabric: Fabric, a: Side, cookie: int, local: int, remote: list[int]) -> Any:
    """One RDMA Read into ``local`` bytes of a's memory: its completion, as ``Side.log``."""
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, local)], cookie, remote, 0)
    fabric.run()
    [done] = a.log()
    return done


def test_a_lone_reads_answer_takes_the_initiators_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    """lane.acks: the READ_RESP of the EP's oldest request, a Read, lands through the lane
    (Answers.landed), never as a frame of the long way (Answers.read_landed); its bytes and
    its completion are the target's and the Read's."""
    landed: list[int] = []
    land = Answers.landed

    def counted(self: Answers, ep: Ep, op: Op, length: int) -> None:
        landed.append(length)
        land(self, ep, op, length)

    monkeypatch.setattr(Answers, "landed", counted)
    monkeypatch.setattr(Answers, "read_landed", lambda *_: pytest.fail("the long way"))
    fabric, a, b = pair()  # its tables take the methods above
    for cookie, n in ((1, 64), (2, 1), (3, 4096)):
        b.memory()[:n] = bytes([cookie]) * n
        assert _read(fabric, a, cookie, n, b.rmr(0, n)) == (E.DTO_COMPLETION_EVENT, cookie, OK, n)
        assert bytes(a.memory(0, n)) == bytes([cookie]) * n
    assert landed == [64, 1, 4096]


def test_a_lone_read_request_takes_the_targets_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    """lane.reads: after a link's first RDMA Read request (the long way's, Target.request),
    each that is the whole read and the link's next request is executed in the lane and
    answered at once; the answers carry the target's bytes of the moment."""
    long_way: list[str] = []
    request = Target.request

    def counted(self: Target, link: PeerLink, frame: Any) -> None:
        long_way.append(frame.type.name)
        request(self, link, frame)

    monkeypatch.setattr(Target, "request", counted)
    fabric, a, b = pair()  # its table of frame handlers takes the one above
    for cookie in range(1, 5):
        b.memory()[:64] = bytes([cookie]) * 64
        assert _read(fabric, a, cookie, 64, b.rmr(0, 64)) == (
            E.DTO_COMPLETION_EVENT,
            cookie,
            OK,
            64,
        )
        assert bytes(a.memory(0, 64)) == bytes([cookie]) * 64
    assert long_way == ["READ_REQ"]


def test_a_read_into_more_than_it_asked_for_takes_the_long_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Read whose local buffer is longer than its remote length: the lane leaves its answer
    to the long way (which alone refuses an answer longer than the Read asked for); it lands
    the remote length, and the rest of the buffer is untouched."""
    long_way: list[int] = []
    read_landed = Answers.read_landed

    def counted(self: Answers, link: PeerLink, frame: Any) -> None:
        long_way.append(frame.payload_len)
        read_landed(self, link, frame)

    monkeypatch.setattr(Answers, "read_landed", counted)
    fabric, a, b = pair()
    b.memory()[:64] = bytes([7]) * 64
    a.memory()[:128] = bytes(128)
    assert _read(fabric, a, 1, 128, b.rmr(0, 64)) == (E.DTO_COMPLETION_EVENT, 1, OK, 64)
    assert bytes(a.memory(0, 128)) == bytes([7]) * 64 + bytes(64)
    assert long_way == [64]


@pytest.mark.interpreted
def test_a_read_posted_with_nothing_outstanding_skips_the_general_post(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Initiator._lone_read: a Read posted while the EP has no request outstanding is taken
    and sent without Initiator.post; one posted behind a Write that waits for its ACK takes
    the general post. Both complete, in order."""
    posted: list[int] = []
    post = Initiator.post

    def counted(self: Initiator, consumer: Any, ep: Ep, wqe: Any, stage: memoryview) -> None:
        posted.append(wqe.cookie)
        post(self, consumer, ep, wqe, stage)

    monkeypatch.setattr(Initiator, "post", counted)
    fabric, a, b = pair()
    assert _read(fabric, a, 1, 64, b.rmr(0, 64))[1:3] == (1, OK)
    assert posted == []
    pipe = fabric.pipe(a.c.node, b.c.node)
    pipe.held = True
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(64, 64)], 2, b.rmr(64, 64), 0)
    fabric.run()
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 64)], 3, b.rmr(0, 64), 0)
    fabric.run()
    pipe.release()
    fabric.run()
    assert [brief[1:3] for brief in a.log()] == [(2, OK), (3, OK)]
    assert posted == [3]


def _lmr_free(b: Side) -> None:
    b.c.call(b.c.core.lmr_free(b.lmr.handle))


def _revoke(b: Side) -> None:
    b.c.admin("rmr_revoke", [b.lmr.rmr_context])


@pytest.mark.parametrize("stop", [_lmr_free, _revoke], ids=["lmr_free", "rmr_revoke"])
def test_a_key_revoked_after_its_writes_took_the_lane_refuses_the_next(
    laned: list[int], stop: Callable[[Side], None]
) -> None:
    """No grant outlives its key: the Write after the revoke is a remote access error and
    writes nothing (then the connection breaks, as RC's errors do)."""
    fabric, a, b = pair()
    view = b.c.view(b.address, b.size)  # the bytes stay readable in the consumer's mapping
    view[:] = bytes(4096)
    assert _write(fabric, a, 1, b.rmr(0, 64), 1) == OK
    assert _write(fabric, a, 2, b.rmr(64, 64), 2) == OK
    assert sum(laned) == 1
    stop(b)
    assert _write(fabric, a, 3, b.rmr(128, 64), 3) == St.DTO_ERR_REMOTE_ACCESS
    assert bytes(view[128:192]) == bytes(64)
    assert sum(laned) == 1


def _read_64(fabric: Fabric, a: Side, cookie: int, remote: list[int]) -> tuple[St, bytes]:
    """One 64 B RDMA Read at window 1: its completion's status and the bytes it brought."""
    a.memory(0, 64)[:] = bytes(64)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 64)], cookie, remote, 0)
    fabric.run()
    [done] = [e for e in a.events() if e.event_number == E.DTO_COMPLETION_EVENT]
    assert done.cookie == cookie
    return St(done.status), bytes(a.memory(0, 64))


@pytest.mark.parametrize("stop", [_lmr_free, _revoke], ids=["lmr_free", "rmr_revoke"])
def test_no_read_under_a_key_outlives_it(stop: Callable[[Side], None]) -> None:
    """The target keeps a key its RDMA Reads passed the checks under (remote_access.readable:
    the next Reads check only their range); after the key is revoked, the next Read is a
    remote access error that brings nothing, and one outside the key's range fails too."""
    fabric, a, b = pair()
    view = b.c.view(b.address, b.size)
    view[:] = bytes(range(256)) * 16
    for i in range(3):
        assert _read_64(fabric, a, i, b.rmr(64 * i, 64)) == (OK, bytes(view[64 * i : 64 * i + 64]))
    key = b.rmr(0, 64)
    assert _read_64(fabric, a, 3, [key[0] + b.size, 64, key[2]])[0] == St.DTO_ERR_REMOTE_ACCESS
    fabric, a, b = pair()
    view = b.c.view(b.address, b.size)
    view[:] = bytes(range(256)) * 16
    assert _read_64(fabric, a, 1, b.rmr(0, 64)) == (OK, bytes(view[0:64]))
    stop(b)
    assert _read_64(fabric, a, 2, b.rmr(64, 64)) == (St.DTO_ERR_REMOTE_ACCESS, bytes(64))


def test_a_write_outside_the_keys_range_takes_the_long_way_and_fails(laned: list[int]) -> None:
    fabric, a, b = pair()
    assert _write(fabric, a, 1, b.rmr(0, 64), 1) == OK
    past = [b.address + b.size - 32, 64, b.lmr.rmr_context]
    assert _write(fabric, a, 2, past, 2) == St.DTO_ERR_REMOTE_ACCESS
    assert sum(laned) == 0


def test_a_write_under_another_key_passes_its_own_checks_first(laned: list[int]) -> None:
    """A grant is one key's: a Write under a second LMR's key (read-only remotely) is
    checked the long way and refused, though the first key's Writes take the lane."""
    fabric, a, b = pair()
    core = b.c.core
    address = b.c.alloc(4096)
    privileges = MemPriv.LOCAL_READ | MemPriv.LOCAL_WRITE | MemPriv.REMOTE_READ
    other = b.c.call(core.lmr_create(MemType.VIRTUAL, address, 4096, b.pz, privileges, b.c.locate))
    assert _write(fabric, a, 1, b.rmr(0, 64), 1) == OK
    assert _write(fabric, a, 2, b.rmr(64, 64), 2) == OK
    refused = [address, 64, other.rmr_context]
    assert _write(fabric, a, 3, refused, 3) == St.DTO_ERR_REMOTE_ACCESS
    assert bytes(b.c.view(address, 64)) == bytes(64)
    assert sum(laned) == 1


def test_writes_behind_a_send_wait_for_its_receive_as_before(laned: list[int]) -> None:
    """A Send with no receive posted stalls the stream: the Write behind it lands only once a
    receive takes the Send. (The lane stops at the Send, and the Write is not the next request
    while the Send waits; its refusal of a stalled link is a second guard this cannot tell
    apart.)"""
    fabric, a, b = pair()
    assert _write(fabric, a, 1, b.rmr(0, 64), 1) == OK  # the grant
    a.memory(0, 8)[:] = b"sendsend"
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 8)], 2, None, 0)
    a.memory(64, 64)[:] = b"\x05" * 64
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(64, 64)], 3, b.rmr(64, 64), 0)
    fabric.run()
    assert a.events() == [] and bytes(b.memory(64, 64)) == bytes(64)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(1024, 64)], 9, None, 0)
    fabric.run()
    assert [(e.cookie, e.status) for e in a.events()] == [(2, OK), (3, OK)]
    assert bytes(b.memory(64, 64)) == b"\x05" * 64
    assert bytes(b.memory(1024, 8)) == b"sendsend"


def test_a_read_of_lone_writes_is_answered_at_once(answered: list[int]) -> None:
    """From the second Write under a key on, the target lands each and sends its ACK in one
    call; the ACK retires it as the long way's would."""
    fabric, a, b = pair()
    for i in range(4):
        assert _write(fabric, a, i, b.rmr(64 * i, 64), i + 1) == OK
        assert bytes(b.memory(64 * i, 64)) == bytes([i + 1]) * 64
    link = next(iter(b.c.node.nic.wire.links.values()))
    assert answered == [link.acked - 2, link.acked - 1, link.acked]


def test_with_fault_rules_set_the_ack_of_a_read_answered_at_once_takes_the_fault_path(
    answered: list[int], laned: list[int]
) -> None:
    """The Write takes the lane and its read is answered at once, but its ACK leaves through
    the fault rules as any frame does (here delayed)."""
    fabric, a, b = pair()
    assert _write(fabric, a, 1, b.rmr(0, 64), 1) == OK
    add_rule(b.c, action="delay", op="ACK", delay_ms=5.0)
    a.memory(0, 64)[:] = b"\x07" * 64
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 64)], 2, b.rmr(64, 64), 0)
    fabric.run()
    assert a.events() == [] and bytes(b.memory(64, 64)) == b"\x07" * 64
    fabric.advance(0.005)
    assert [(e.cookie, e.status) for e in a.events()] == [(2, OK)]
    assert len(answered) == 1 and sum(laned) == 1


@pytest.mark.parametrize("kind", [Dtos.RDMA_WRITE, Dtos.SEND])
def test_a_payload_that_lands_directly_completes_with_nothing_read_after_it(
    kind: Dtos, answered: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A payload of DIRECT_LANDING_MIN bytes or more whose first bytes came with its header
    is read straight into its place, and the read that completes it ends with it: its frame
    is whole but not yet handled, so that read is not answered at once, and the frame
    completes with nothing more to read (the last Write of a window, or a Send behind Writes,
    waited for the next heartbeat's bytes)."""
    size = 2 * DIRECT_LANDING_MIN
    fabric, a, b = pair(size=size)
    assert _write(fabric, a, 1, b.rmr(0, 64), 1) == OK  # a key granted: the lane is open
    to_b = fabric.pipe(a.c.node, b.c.node)
    deliver = to_b.deliver

    def in_two_reads(data: bytes) -> None:  # the header and a few bytes, then the rest
        deliver(data[:256])
        deliver(data[256:])

    monkeypatch.setattr(to_b, "deliver", in_two_reads)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, size)], 9, None, 0)
    a.memory()[:] = b"\x05" * size
    remote = b.rmr(0, size) if kind == Dtos.RDMA_WRITE else None
    a.c.post(kind, a.ep, [a.triplet(0, size)], 2, remote, 0)
    fabric.run()
    assert [(e.cookie, e.status) for e in a.events()] == [(2, OK)]
    assert bytes(b.memory()) == b"\x05" * size and answered == []
