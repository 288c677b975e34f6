"""The client's inline post (client._ringpost, in C) against its general checks: over a
seeded spread of arguments around a valid post, each wrong in one or more ways (handle, iov
shape, segment, cookie, flags, remote triplet, lengths against the EP's limits, a full queue,
an EP that cannot take requests), the post with the inline path gives exactly what the general
checks alone give: the same DAT_RETURN, or the same WQE bytes and doorbell."""

from __future__ import annotations

import random
from typing import Any

import pytest

from client import _ringpost
from client.posting import Posting, plain_posts
from proto.attrs import EpAttr
from proto.constants import CompletionFlags, Dtos, MemPriv, MemType
from proto.errors import DatError
from proto.hostif import Ring
from tests.core.flows import Side, connect, side
from tests.core.harness import Fabric

CASES = 4000
SEED = 20261126
SIZE = 4096
ATTR = EpAttr(max_request_dtos=8, max_recv_dtos=8, max_message_size=1024, max_rdma_size=2048)

Outcome = tuple[object, ...]


def _sides() -> tuple[Side, Side, Side]:
    """A connected EP (its side also holds a read-only LMR, in a second PZ an LMR no EP of the
    side may use), and an EP of a side that never connected."""
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2")
    a, b = side(fabric, n1, SIZE, attr=ATTR), side(fabric, n2, SIZE, attr=ATTR)
    connect(fabric, a, b)
    lonely = side(fabric, n1, SIZE, attr=ATTR)
    return a, b, lonely


class _Declines:
    """client._ringpost declining every post: the general checks take each."""

    @staticmethod
    def post(*args: object) -> None:
        return None


class _Counting:
    """client._ringpost as it is (whichever build is loaded), counting the posts it took."""

    def __init__(self, real: Any) -> None:
        self.real, self.took = real, 0

    def post(self, *args: Any) -> bool | None:
        posted: bool | None = self.real.post(*args)
        self.took += posted is not None
        return posted


def _posting_through(patch: pytest.MonkeyPatch, posting: Posting, c_post: Any) -> None:
    """``posting`` takes its common posts through ``c_post`` (client._ringpost's ``post`` or a
    stand-in) for as long as ``patch`` lasts."""
    patch.setattr(posting, "plain", plain_posts(c_post.post, posting.eps, posting.regions))


def _posting(s: Side) -> Posting:
    posting = s.c.core.post.__self__  # type: ignore[attr-defined]
    assert isinstance(posting, Posting)
    return posting


def _attempt(posting: Posting, s: Side, args: tuple[Any, ...]) -> Outcome:
    """Post: what it gave (the error, or the WQE bytes written and the doorbell)."""
    ep = s.c.core.eps[s.ep]
    sq, rq = posting.queues(ep)
    marks = (sq.mine, rq.mine)
    try:
        doorbell = posting.post(*args)
    except DatError as err:
        return ("error", type(err), err.subtype)
    written = [_slot(sq, marks[0]), _slot(rq, marks[1])]
    return ("posted", *[w for w in written if w is not None], doorbell)


def _restore(s: Side, marks: tuple[int, int, int]) -> None:
    """The EP's queues and doorbell count as ``_marks`` took them (the daemon never looked)."""
    ep = s.c.core.eps[s.ep]
    assert ep.sq is not None and ep.rq is not None
    ep.sq.mine, ep.rq.mine, ep.rung = marks
    ep.sq.publish(0)
    ep.rq.publish(0)


def _marks(posting: Posting, s: Side) -> tuple[int, int, int]:
    ep = s.c.core.eps[s.ep]
    sq, rq = posting.queues(ep)
    return sq.mine, rq.mine, ep.rung


def _slot(ring: Ring, mark: int) -> bytes | None:
    """The slot written since ``mark`` (None if none was)."""
    if ring.mine == mark:
        return None
    at = ring.slot(mark)
    return bytes(ring.view[at : at + ring.entry_size])


def _fill(posting: Posting, s: Side, count: int) -> None:
    """``count`` valid Writes and receives of no segment posted first (a queue holds 8)."""
    for i in range(count):
        posting.post(Dtos.RDMA_WRITE, s.ep, [], i, [0, 8, 1], 0)
        posting.post(Dtos.RECEIVE, s.ep, [], i, None, 0)


def _cases(a: Side, b: Side, lonely: Side) -> list[tuple[Side, int, tuple[Any, ...]]]:
    """(the side, its queue entries posted first, the post's arguments), each argument valid
    half the time."""
    rng = random.Random(SEED)
    extra = a.c.call(
        a.c.core.lmr_create(MemType.VIRTUAL, a.address, 256, a.pz, MemPriv.LOCAL_READ, a.c.locate)
    )
    pz2 = a.c.call(a.c.core.pz_create())
    other_pz = a.c.call(
        a.c.core.lmr_create(MemType.VIRTUAL, a.address, 256, pz2, MemPriv.ALL, a.c.locate)
    )
    contexts = [a.lmr.lmr_context, extra.lmr_context, other_pz.lmr_context, b.lmr.lmr_context,
                0, True, "x", 2**32]  # fmt: skip
    lengths = [64, 0, 1, 256, SIZE, SIZE + 1, 1024, 1025, 2048, 2049, -1, 2**32, True, 1.0]
    offsets = [0, 128, SIZE - 64, SIZE - 1, -8, 2**64]
    r_lengths = [64, 0, 63, 65, 2048, 2049, -1, 2**32, None]
    r_fields = [0, 7, 2**64 - 1, 2**64, -1, 2**32 - 1, 2**32, True, "r"]
    cookies = [5, 0, 2**64 - 1, 2**64, -1, True, 1.5, "c"]
    flags = [*CompletionFlags, 0, 0x40, -1, True, "f"]
    kinds = [Dtos.RDMA_WRITE, Dtos.RDMA_READ, Dtos.SEND, Dtos.RECEIVE]

    def pick(valid: object, others: list[Any]) -> Any:
        return valid if rng.random() < 0.8 else rng.choice(others)

    out = []
    for _ in range(CASES):
        who = a if rng.random() < 0.9 else lonely
        length = pick(64, lengths)
        offset = pick(0, offsets)
        address = who.address + offset if type(offset) is int and offset < 2**64 else offset
        segment: Any = [address, length, pick(who.lmr.lmr_context, contexts)]
        if rng.random() < 0.1:
            segment = rng.choice([tuple(segment), segment[:2], [*segment, 0], {"a": 1}, None])
        iov: Any = [segment]
        if rng.random() < 0.1:
            iov = rng.choice([(segment,), [], [segment, segment], [segment] * 5, segment, None])
        r_length = pick(length if type(length) is int else 64, r_lengths)
        remote: Any = [pick(b.address, r_fields), r_length, pick(b.lmr.rmr_context, r_fields)]
        if rng.random() < 0.1:
            remote = rng.choice([tuple(remote), remote[:2], None, 7])
        handle = pick(who.ep, [who.ep + 1, 0, -1, "ep", True, None])
        args = (rng.choice(kinds), handle, iov, pick(5, cookies), remote, pick(0, flags))
        filled = rng.choice([0, 0, 0, 7, 8]) if who is a else 0  # the lonely EP takes no Write
        out.append((who, filled, args))
    return out


ATTRS: dict[str, dict[str, int]] = {
    "as created": {},
    "UNSIGNALLED allowed": {"request_completion_flags": CompletionFlags.UNSIGNALLED},
    "no segment allowed": {"max_rdma_write_iov": 0, "max_recv_iov": 0, "max_request_iov": 0},
}


@pytest.mark.parametrize("attrs", sorted(ATTRS))
def test_the_inline_post_gives_exactly_what_the_general_checks_give(
    attrs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, lonely = _sides()
    mirror = a.c.core.eps[a.ep]
    for name, value in ATTRS[attrs].items():  # the client's mirror of the attributes
        setattr(mirror.attr, name, value)
    mirror.fast = None  # as dat_ep_modify leaves it: the snapshot is made again
    taken, counting = 0, _Counting(_ringpost)
    for who, filled, args in _cases(a, b, lonely):
        posting = _posting(who)
        marks = _marks(posting, who)
        _fill(posting, who, filled)
        with monkeypatch.context() as patch:
            _posting_through(patch, posting, counting)
            inline = _attempt(posting, who, args)
        _restore(who, marks)
        _fill(posting, who, filled)
        with monkeypatch.context() as patch:
            _posting_through(patch, posting, _Declines)
            checked = _attempt(posting, who, args)
        _restore(who, marks)
        assert inline == checked, f"{args} after {filled} posted"
        taken += inline[0] == "posted"
    assert taken > CASES // 20, "the spread reaches posts that succeed"
    assert counting.took > CASES // 20, "and the C post takes them, not only the checks"
