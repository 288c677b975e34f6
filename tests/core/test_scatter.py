"""Scatter lists longer than the payload: an RDMA Read response and a Send land in the front
segments of the local iov (the last one partly), and not one byte past the payload moves."""

from __future__ import annotations

import pytest

from fabricd.nic.views import truncate
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos
from proto.constants import EventNumber as E
from tests.core.flows import Side, pair

DTO = E.DTO_COMPLETION_EVENT
OFFSETS = (0, 100, 200, 300)  # four 16-byte segments with gaps between them
PATTERN = bytes(range(1, 65))


def _iov(s: Side) -> list[list[int]]:
    return [s.triplet(at, 16) for at in OFFSETS]


def _landed(s: Side) -> bytes:
    """The four segments' bytes, in iov order."""
    return b"".join(bytes(s.memory(at, 16)) for at in OFFSETS)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 33, 48, 49, 63, 64])
def test_an_rdma_read_fills_the_front_segments_of_a_longer_iov(n: int) -> None:
    """dat_ep_post_rdma_read of n bytes into four 16-byte segments: the first n bytes of the
    iov hold them, the rest of the iov and the gaps keep their bytes."""
    fabric, a, b = pair()
    a.memory()[:] = b"\xaa" * a.size
    b.memory(0, 64)[:] = PATTERN
    a.c.post(Dtos.RDMA_READ, a.ep, _iov(a), 1, b.rmr(0, n), 0)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_SUCCESS, n)]
    assert _landed(a) == PATTERN[:n] + b"\xaa" * (64 - n)
    assert bytes(a.memory(16, 84)) == b"\xaa" * 84, "a gap between segments"
    assert bytes(a.memory(316)) == b"\xaa" * (a.size - 316)


@pytest.mark.parametrize("n", [1, 16, 17, 33, 49, 64])
def test_a_send_fills_the_front_segments_of_a_longer_receive(n: int) -> None:
    """dat_ep_post_send of n bytes into a receive of four 16-byte segments (dat_ep_post_recv):
    the receive completes with n, its first n bytes hold the message, the rest keep theirs."""
    fabric, a, b = pair()
    b.memory()[:] = b"\xbb" * b.size
    a.memory(0, 64)[:] = PATTERN
    b.c.post(Dtos.RECEIVE, b.ep, _iov(b), 2, None, 0)
    a.c.post(Dtos.SEND, a.ep, [a.triplet(0, n)], 1, None, 0)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_SUCCESS, n)]
    assert b.log() == [(DTO, 2, St.DTO_SUCCESS, n)]
    assert _landed(b) == PATTERN[:n] + b"\xbb" * (64 - n)


def test_truncate_keeps_exactly_the_segments_the_payload_reaches() -> None:
    """The sink of an n-byte payload: the front segments it reaches, the last cut to size, and
    no segment after it (not even an empty one); views of the same bytes."""
    buf = bytearray(64)
    views = [memoryview(buf)[at : at + 16] for at in (0, 16, 32, 48)]
    assert [len(v) for v in truncate(views, 33)] == [16, 16, 1]
    assert [len(v) for v in truncate(views, 32)] == [16, 16]
    assert [len(v) for v in truncate(views, 16)] == [16]
    assert [len(v) for v in truncate(views, 64)] == [16, 16, 16, 16]
    assert truncate(views, 0) == []
    truncate(views, 17)[1][0] = 7
    assert buf[16] == 7 and buf.count(0) == 63
