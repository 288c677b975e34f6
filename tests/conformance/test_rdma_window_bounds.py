"""Exact bounds of a remote window, for RDMA Write and RDMA Read, over real daemons.

A remote access names an rmr_context and a range; the target lets it through only if the whole
range lies inside what that context grants (dat_ep_post_rdma_read R: DAT_PRIVILEGES_VIOLATION /
DAT_PROTECTION_VIOLATION "for ... remote memory access", which a target reports as the completion
status DAT_DTO_ERR_REMOTE_ACCESS and a broken connection; dat_rmr_bind D: the RMR is bound "to
the specified memory region within an LMR"). Two kinds of window, each 64 bytes at offset 1024 of
the target's 4096-byte buffer, so that the bytes just outside it are real, registered memory:

- ``lmr``: the rmr_context of an LMR registered over exactly those 64 bytes;
- ``rmr``: the rmr_context of an RMR bound (dat_rmr_bind) to those 64 bytes of an LMR that
  covers the whole buffer; the byte after the window is inside that LMR, so only the window's own
  bound can refuse it.

Each test checks every byte of both buffers afterwards: an access that fits moves exactly its
bytes, one that does not moves nothing at all (not the byte past the end, not the bytes inside).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from client.core import Event
from fabricd.launch import Node
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, MemPriv, MemType
from tests.conformance.support import E, Side, completion, connected, nothing_queued, pattern
from tests.integration.flows import wait_event

SIZE = 4096
AT = 1024  # the window's offset in the target's buffer
WIDTH = 64  # the window's length
LANDING = 2048  # where a read lands (and a write is taken from) in the initiator's buffer
RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE
OPS = ["write", "read"]
KINDS = ["lmr", "rmr"]


@dataclass
class Window:
    """The target's window: its first address, its rmr_context, and the connection."""

    a: Side  # the initiator
    b: Side  # the target
    address: int
    context: int

    def remote(self, offset: int, length: int) -> list[int]:
        """The RMR triplet of ``length`` bytes at ``offset`` from the window's start."""
        return [self.address + offset, length, self.context]


@contextmanager
def window(nodes: tuple[Node, Node], kind: str) -> Iterator[Window]:
    """A connected pair whose target offers a 64-byte window at AT of its buffer; both buffers
    are filled with recognisable bytes."""
    with connected(*nodes, size=SIZE) as (a, b):
        a.view[:] = pattern(SIZE, 3)
        b.view[:] = pattern(SIZE, 5)
        if kind == "lmr":
            lmr = b.ia.lmr_create(MemType.VIRTUAL, b.buf.address + AT, WIDTH, b.pz, MemPriv.ALL)
            assert (lmr.registered_address, lmr.registered_size) == (b.buf.address + AT, WIDTH)
            address, context = lmr.registered_address, lmr.rmr_context
        else:
            rmr = b.ia.rmr_create(b.pz)
            context = rmr.bind(b.lmr, b.lmr.triplet(AT, WIDTH), RW, b.ep, 0xB1)
            bound = wait_event(b.request_evd, E.RMR_BIND_COMPLETION_EVENT)
            assert (bound.cookie, bound.status) == (0xB1, St.DTO_SUCCESS)
            address = b.lmr.registered_address + AT
        yield Window(a, b, address, context)


def access(w: Window, op: str, offset: int, length: int) -> Event:
    """An RDMA Write of ``length`` bytes (from LANDING of the initiator's buffer) to, or an RDMA
    Read of them into LANDING from, the window at ``offset``; its completion."""
    local = [w.a.lmr.triplet(LANDING, length)] if length else []
    remote = w.remote(offset, length)
    if op == "write":
        w.a.ep.post_rdma_write(local, 7, remote)
    else:
        w.a.ep.post_rdma_read(local, 7, remote)
    done = completion(w.a.request_evd)
    kind = Dtos.RDMA_WRITE if op == "write" else Dtos.RDMA_READ
    assert (done.cookie, done.operation) == (7, kind)
    return done


def refused_and_untouched(w: Window, op: str, offset: int, length: int) -> None:
    """The access fails with DAT_DTO_ERR_REMOTE_ACCESS, the connection breaks on both sides,
    and not one byte of either buffer changed."""
    done = access(w, op, offset, length)
    assert done.status == St.DTO_ERR_REMOTE_ACCESS, done
    wait_event(w.a.connect_evd, E.CONNECTION_EVENT_BROKEN)
    wait_event(w.b.connect_evd, E.CONNECTION_EVENT_BROKEN)
    target, initiator = bytes(w.b.view), bytes(w.a.view)
    assert target[AT - 1] == pattern(SIZE, 5)[AT - 1], "the byte before the window changed"
    assert target[AT + WIDTH] == pattern(SIZE, 5)[AT + WIDTH], "the byte after the window changed"
    assert target[AT : AT + WIDTH] == pattern(SIZE, 5)[AT : AT + WIDTH], "the window changed"
    assert target == pattern(SIZE, 5), "the target's buffer changed"
    assert initiator == pattern(SIZE, 3), "the initiator's buffer changed"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("offset", "length"), [(48, 16), (0, WIDTH), (63, 1)], ids=["tail", "whole", "last byte"]
)
def test_an_access_ending_at_the_windows_last_byte_moves_exactly_its_bytes(
    nodes: tuple[Node, Node], kind: str, op: str, offset: int, length: int
) -> None:
    """An access that ends exactly at the window's last byte succeeds with its full length;
    a write lands exactly those bytes of the target (the bytes just before and after the
    window, and the rest of the window, are unchanged), a read brings exactly those bytes into
    the initiator's landing range and nothing around it."""
    with window(nodes, kind) as w:
        done = access(w, op, offset, length)
        assert (done.status, done.transfered_length) == (St.DTO_SUCCESS, length)
        target, initiator = bytearray(pattern(SIZE, 5)), bytearray(pattern(SIZE, 3))
        start = AT + offset
        if op == "write":
            target[start : start + length] = initiator[LANDING : LANDING + length]
        else:
            initiator[LANDING : LANDING + length] = target[start : start + length]
        got_target = bytes(w.b.view)
        assert got_target[AT - 1] == target[AT - 1], "the byte before the window changed"
        assert got_target[AT + WIDTH] == target[AT + WIDTH], "the byte after the window changed"
        assert got_target == bytes(target)
        assert bytes(w.a.view) == bytes(initiator)
        nothing_queued(w.a.connect_evd, w.b.connect_evd)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("offset", "length"), [(49, 16), (WIDTH, 1), (1, WIDTH)], ids=["49+16", "64+1", "1+64"]
)
def test_an_access_one_byte_past_the_windows_end_fails_and_moves_nothing(
    nodes: tuple[Node, Node], kind: str, op: str, offset: int, length: int
) -> None:
    """An access whose last byte is the one just after the window (16 bytes at offset 49 of the
    64-byte window, 1 byte at offset 64, the window's length one byte late) completes with
    DAT_DTO_ERR_REMOTE_ACCESS and breaks the connection; a write lands nothing, neither the byte
    after the window nor the 15 bytes inside it; a read brings nothing."""
    with window(nodes, kind) as w:
        refused_and_untouched(w, op, offset, length)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("offset", "length"), [(-1, 16), (-1, 1), (-1, WIDTH)], ids=["-1+16", "-1+1", "-1+64"]
)
def test_an_access_starting_one_byte_before_the_window_fails_and_moves_nothing(
    nodes: tuple[Node, Node], kind: str, op: str, offset: int, length: int
) -> None:
    """An access that starts at the byte just before the window (whatever its length, even one
    that would end inside it or exactly at its end) completes with DAT_DTO_ERR_REMOTE_ACCESS,
    breaks the connection and moves nothing."""
    with window(nodes, kind) as w:
        refused_and_untouched(w, op, offset, length)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", OPS)
def test_a_zero_length_access_at_the_windows_end_succeeds_and_moves_nothing(
    nodes: tuple[Node, Node], kind: str, op: str
) -> None:
    """A zero-length access at the window's end (the empty range [end, end), which lies inside
    the window) succeeds with length 0, moves no byte, and the connection stays up: a full-size
    access works afterwards."""
    with window(nodes, kind) as w:
        done = access(w, op, WIDTH, 0)
        assert (done.status, done.transfered_length) == (St.DTO_SUCCESS, 0)
        assert bytes(w.b.view) == pattern(SIZE, 5)
        assert bytes(w.a.view) == pattern(SIZE, 3)
        nothing_queued(w.a.connect_evd, w.b.connect_evd)
        assert access(w, op, 0, WIDTH).status == St.DTO_SUCCESS
