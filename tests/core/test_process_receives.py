"""Sends into receives over a consumer process's own memory (a C program's malloc): the Sends
of one SENDS frame land as a run, their bytes written into the process in one call straight
from the frame, and every receive completes exactly as if the Sends had come one by one."""

from __future__ import annotations

import pytest

from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos
from proto.constants import EventNumber as E
from tests.core.flows import Side, pair
from tests.core.test_process_memory import BASE, own_lmr, own_lmr_handle

DTO = E.DTO_COMPLETION_EVENT
OK = St.DTO_SUCCESS
BROKEN = (E.CONNECTION_EVENT_BROKEN, b"")


def _receives(b: Side, buffers: list[tuple[int, int]]) -> None:
    """Receive i: 8 bytes at ``buffers[i]`` (lmr_context, address), cookie 100 + i."""
    for i, (lmr_context, address) in enumerate(buffers):
        b.c.post(Dtos.RECEIVE, b.ep, [[address, 8, lmr_context]], 100 + i, None, 0)
    b.c.fabric.run()


def _sends(a: Side, count: int) -> None:
    """One Send that leaves first (its doorbell is taken at once), then ``count`` posted in
    the same turn, which travel together: Send i carries 8 bytes ``i + 1``."""
    for i in range(count + 1):
        a.memory(8 * i, 8)[:] = bytes([i + 1]) * 8
        a.c.post(Dtos.SEND, a.ep, [a.triplet(8 * i, 8)], i, None, 0)
    a.c.fabric.run()


@pytest.mark.parametrize(("step", "pieces"), [(16, 5), (8, 1)], ids=["apart", "adjacent"])
def test_a_batch_of_sends_reaches_its_receives_in_one_transfer(step: int, pieces: int) -> None:
    """The five Sends of a batch reach their receives in one call: a piece each when the
    receives lie apart, one piece when they follow on (as their bytes do in the payload)."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(128))
    lmr_context, _ = own_lmr(b, BASE, 128)
    _receives(b, [(lmr_context, BASE + step * i) for i in range(6)])
    _sends(a, 5)
    assert a.log() == [(DTO, i, OK, 8) for i in range(6)]
    assert b.log() == [(DTO, 100 + i, OK, 8) for i in range(6)]
    held = fabric.processes.buffers[b.c.pid][BASE]
    for i in range(6):
        assert held[step * i : step * i + 8] == bytes([i + 1]) * 8
        assert step == 8 or held[step * i + 8 : step * i + 16] == bytes(8), "the gaps untouched"
    assert fabric.processes.writes == [1, pieces], "the first Send, then the five in one call"


def test_sends_into_one_shared_receive_buffer_leave_the_last_ones_bytes() -> None:
    """Every receive names the same bytes (perftest's receiver does): the batch goes as one
    piece, the last Send's, as if each had landed in turn."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(8))
    lmr_context, _ = own_lmr(b, BASE, 8)
    _receives(b, [(lmr_context, BASE)] * 6)
    _sends(a, 5)
    assert b.log() == [(DTO, 100 + i, OK, 8) for i in range(6)]
    assert fabric.processes.buffers[b.c.pid][BASE] == b"\x06" * 8
    assert fabric.processes.writes == [1, 1]


def test_a_batch_whose_receive_buffer_is_gone_completes_those_before_it() -> None:
    """The process unmapped the buffer of receive 4: the batch's transfer fails, its Sends
    then land one by one; the receives before complete, receive 4 fails with a protection
    error, the sender's Send 4 with a remote access error, and the connection breaks."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(32))
    fabric.processes.place(b.c.pid, BASE + 32, bytes(32))
    low, _ = own_lmr(b, BASE, 32)
    high, _ = own_lmr(b, BASE + 32, 32)
    _receives(b, [(low, BASE + 8 * i) for i in range(4)] + [(high, BASE + 32), (high, BASE + 40)])
    fabric.processes.remove(b.c.pid, BASE + 32)
    _sends(a, 5)
    assert b.log()[:6] == [(DTO, 100 + i, OK, 8) for i in range(4)] + [
        (DTO, 104, St.DTO_ERR_LOCAL_PROTECTION, 0),
        BROKEN,
    ]
    assert a.log()[:5] == [(DTO, i, OK, 8) for i in range(4)] + [
        (DTO, 4, St.DTO_ERR_REMOTE_ACCESS, 0)
    ]
    assert fabric.processes.buffers[b.c.pid][BASE] == b"".join(bytes([i + 1]) * 8 for i in range(4))


def test_a_receive_of_two_segments_takes_a_send_across_both() -> None:
    """A receive of two segments of the process's memory (4 and 8 bytes, apart): a 10-byte
    Send fills the first and 6 bytes of the second, one piece each in one call; a receive
    whose second segment is shared memory takes its Send through the general path."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    lmr_context, _ = own_lmr(b, BASE, 64)
    b.c.post(Dtos.RECEIVE, b.ep, [[BASE + 32, 8, lmr_context]], 100, None, 0)
    two = [[BASE, 4, lmr_context], [BASE + 16, 8, lmr_context]]
    b.c.post(Dtos.RECEIVE, b.ep, two, 101, None, 0)
    mixed = [[BASE + 48, 4, lmr_context], b.triplet(0, 8)]
    b.c.post(Dtos.RECEIVE, b.ep, mixed, 102, None, 0)
    fabric.run()
    for i, n in enumerate((8, 10, 10)):
        a.memory(16 * i, n)[:] = bytes(range(16 * i, 16 * i + n))
        a.c.post(Dtos.SEND, a.ep, [a.triplet(16 * i, n)], i, None, 0)
    fabric.run()
    assert b.log() == [(DTO, 100, OK, 8), (DTO, 101, OK, 10), (DTO, 102, OK, 10)]
    held = fabric.processes.buffers[b.c.pid][BASE]
    assert held[32:40] == bytes(range(8))
    assert held[0:4] == bytes(range(16, 20)) and held[4:16] == bytes(12)
    assert held[16:22] == bytes(range(20, 26)) and held[22:24] == bytes(2)
    assert held[48:52] == bytes(range(32, 36)) and bytes(b.memory(0, 6)) == bytes(range(36, 42))
    # the first Send alone (its doorbell), the second as two pieces, the mixed one on its own
    assert fabric.processes.writes == [1, 2, 1]


@pytest.mark.parametrize("before", [0, 2], ids=["alone", "after two that land"])
def test_a_receive_whose_lmr_was_freed_since_it_was_posted_fails_with_local_protection(
    before: int,
) -> None:
    """dat_lmr_free while a receive into the LMR is posted (the NIC's key for it is gone): the
    Send that reaches that receive lands nothing; the receive completes with a local protection
    error and the connection breaks; the Send fails with a remote access error. Receives of
    another LMR before it complete."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    live, _ = own_lmr(b, BASE, 32)
    handle, gone, _ = own_lmr_handle(b, BASE + 32, 32)
    _receives(b, [(live, BASE + 8 * i) for i in range(before)] + [(gone, BASE + 32)])
    b.c.call(b.c.core.lmr_free(handle))
    _sends(a, before)
    assert b.log() == [(DTO, 100 + i, OK, 8) for i in range(before)] + [
        (DTO, 100 + before, St.DTO_ERR_LOCAL_PROTECTION, 0),
        BROKEN,
    ]
    assert a.log()[: before + 1] == [(DTO, i, OK, 8) for i in range(before)] + [
        (DTO, before, St.DTO_ERR_REMOTE_ACCESS, 0)
    ]
    held = fabric.processes.buffers[b.c.pid][BASE]
    assert held[32:] == bytes(32), "nothing landed in the freed LMR's bytes"
