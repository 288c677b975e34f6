"""LMRs over a consumer process's own memory (lmr_create VIRTUAL with segment ""), as the C
provider registers malloc'd buffers: the daemon reaches the bytes in place, through the
ProcessMemory it was given (here the harness's Processes)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest

from client.core import Call
from fabricd.nic.remote_access import DIRECT_MAX
from proto import calls
from proto.batch import MAX_OP_BYTES
from proto.checks import Region
from proto.constants import (
    CompletionFlags,
    DtoCompletionStatus,
    Dtos,
    EventNumber,
    MemPriv,
    MemType,
)
from proto.constants import DatReturnSubtype as Sub
from proto.errors import DatInvalidParameter
from tests.core.flows import Side, pair
from tests.core.harness import Fabric

BASE = 0x7F00_0000_0000


def own_lmr(s: Side, address: int, length: int) -> tuple[int, int]:
    """Register [address, +length) of ``s``'s process; its (lmr_context, rmr_context)."""
    return own_lmr_handle(s, address, length)[1:]


def own_lmr_handle(s: Side, address: int, length: int) -> tuple[int, int, int]:
    """``own_lmr``, the LMR's handle first."""

    def op() -> Generator[Call, Any, tuple[int, int, int]]:
        args = calls.LmrCreate(MemType.VIRTUAL, "", 0, address, None, 0, length, s.pz, 0x33)
        handle, lmr_context, rmr_context, size, at = yield Call("lmr_create", args)
        assert (size, at) == (length, address)
        s.c.core.regions[lmr_context] = Region(at, size, s.pz, MemPriv.ALL)
        return handle, lmr_context, rmr_context

    result: tuple[int, int, int] = s.c.call(op())
    return result


def test_remote_write_reaches_the_process_before_the_initiator_completes() -> None:
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    _, rmr_context = own_lmr(b, BASE, 64)
    a.memory(0, 16)[:] = b"written in place"
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], 1, [BASE + 8, 16, rmr_context], 0)
    fabric.run()
    (done,) = a.events()
    assert (done.cookie, done.status) == (1, DtoCompletionStatus.DTO_SUCCESS)
    assert bytes(fabric.processes.buffers[b.c.pid][BASE][8:24]) == b"written in place"


def test_remote_read_serves_the_process_bytes_of_now() -> None:
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(32))
    _, rmr_context = own_lmr(b, BASE, 32)
    fabric.processes.buffers[b.c.pid][BASE][:5] = b"later"  # after registration
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(0, 5)], 2, [BASE, 5, rmr_context], 0)
    fabric.run()
    (done,) = a.events()
    assert done.status == DtoCompletionStatus.DTO_SUCCESS
    assert bytes(a.memory(0, 5)) == b"later"


def test_own_memory_as_the_source_and_sink_of_the_initiator() -> None:
    """A Write's source is read from the process when posted; a Read's sink is written to
    it before the completion."""
    fabric, a, b = pair()
    fabric.processes.place(a.c.pid, BASE, b"from the process" + bytes(16))
    lmr_context, _ = own_lmr(a, BASE, 32)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [[BASE, 16, lmr_context]], 3, b.rmr(0, 16), 0)
    fabric.run()
    assert bytes(b.memory(0, 16)) == b"from the process"
    b.memory(100, 16)[:] = b"back to the proc"
    a.c.post(Dtos.RDMA_READ, a.ep, [[BASE + 16, 16, lmr_context]], 4, b.rmr(100, 16), 0)
    fabric.run()
    assert [e.status for e in a.events()] == [DtoCompletionStatus.DTO_SUCCESS] * 2
    assert bytes(fabric.processes.buffers[a.c.pid][BASE][16:]) == b"back to the proc"


def test_a_buffer_gone_from_its_process_is_a_remote_access_error() -> None:
    """The program freed (unmapped) the registered buffer: the Write fails at the target
    like a bad key, the connection breaks, and the daemon goes on."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    _, rmr_context = own_lmr(b, BASE, 64)
    fabric.processes.remove(b.c.pid, BASE)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 5, [BASE, 8, rmr_context], 0)
    fabric.run()
    done = a.events()[0]
    assert done.event_number == EventNumber.DTO_COMPLETION_EVENT
    assert done.status == DtoCompletionStatus.DTO_ERR_REMOTE_ACCESS


def test_registering_memory_the_process_does_not_have() -> None:
    _, a, _ = pair()
    with pytest.raises(DatInvalidParameter) as err:
        own_lmr(a, BASE, 4096)  # nothing placed there
    assert err.value.subtype == Sub.INVALID_ARG3


def test_a_fenced_write_sends_what_the_read_before_it_brought() -> None:
    """BARRIER_FENCE: a Write from the process's memory, fenced behind an RDMA Read into the
    same bytes through another LMR, sends what the Read wrote there, not what the buffer held
    when it was posted."""
    fabric, a, b = pair()
    fabric.processes.place(a.c.pid, BASE, b"old bytes, stale" + bytes(16))
    into, _ = own_lmr(a, BASE, 32)
    out_of, _ = own_lmr(a, BASE, 32)  # a second registration of the same bytes: its own mirror
    b.memory(0, 16)[:] = b"what Read brings"
    core = a.c.core  # both WQEs written before the doorbell: the daemon takes them together
    bells = core.post(Dtos.RDMA_READ, a.ep, [[BASE, 16, into]], 1, b.rmr(0, 16), 0)
    fence = int(CompletionFlags.BARRIER_FENCE)
    bells += core.post(Dtos.RDMA_WRITE, a.ep, [[BASE, 16, out_of]], 2, b.rmr(200, 16), fence)
    a.c.send(bells)
    fabric.run()
    assert [e.status for e in a.events()] == [DtoCompletionStatus.DTO_SUCCESS] * 2
    assert bytes(b.memory(200, 16)) == b"what Read brings"


def _batch_to_process(a: Side, count: int, rmr_for: Any, step: int = 8) -> None:
    """One 8-byte Write that leaves alone (its doorbell is taken at once), then ``count``
    posted in the same turn, which the daemon takes together (one WRITES frame): Write i
    carries bytes ``i + 1`` to BASE + step * i under the key ``rmr_for(i)``."""
    for i in range(count + 1):
        a.memory(8 * i, 8)[:] = bytes([i + 1]) * 8
        remote = [BASE + step * i, 8, rmr_for(i)]
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(8 * i, 8)], i, remote, 0)


@pytest.mark.parametrize(("step", "pieces"), [(8, 1), (16, 6)])
def test_a_batch_of_writes_reaches_the_process_in_one_transfer(step: int, pieces: int) -> None:
    """The six Writes of the batch reach the process in one call: as one piece when they
    touch (their targets and their bytes in the payload follow on), as six when there are gaps
    between them."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(128))
    _, rmr_context = own_lmr(b, BASE, 128)
    _batch_to_process(a, 6, lambda _: rmr_context, step)
    fabric.run()
    assert [e.status for e in a.events()] == [DtoCompletionStatus.DTO_SUCCESS] * 7
    held = fabric.processes.buffers[b.c.pid][BASE]
    for i in range(7):
        assert held[step * i : step * i + 8] == bytes([i + 1]) * 8
        assert step == 8 or held[step * i + 8 : step * i + 16] == bytes(8), "the gaps untouched"
    assert fabric.processes.writes == [1, pieces], "the lone Write, then the batch in one call"


@pytest.mark.parametrize(
    ("step", "held", "pieces"),
    [
        (0, b"\x07" * 8 + bytes(8), 1),
        (4, b"".join(bytes([i + 1]) * 4 for i in range(6)) + b"\x07" * 8, 6),
    ],
    ids=["onto the same bytes", "each overlapping half of the one before"],
)
def test_writes_of_a_batch_onto_bytes_written_before_leave_the_later_ones_bytes(
    step: int, held: bytes, pieces: int
) -> None:
    """8-byte Writes of the batch onto bytes an earlier one wrote: the batch goes in one call
    and where two overlap the later one's bytes stay, as if each had been written in turn
    (onto exactly the same bytes: one piece goes, the last Write's; else one per Write)."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    _, rmr_context = own_lmr(b, BASE, 64)
    _batch_to_process(a, 6, lambda _: rmr_context, step=step)
    fabric.run()
    assert [e.status for e in a.events()] == [DtoCompletionStatus.DTO_SUCCESS] * 7
    assert fabric.processes.buffers[b.c.pid][BASE][: len(held)] == held
    assert fabric.processes.writes == [1, pieces]


def _free_mid_payload(fabric: Fabric, a: Side, b: Side, handle: int) -> list[int]:
    """Hold what ``a`` posted on its way to ``b``, deliver all of it but its last 4 bytes,
    free LMR ``handle`` of ``b``, deliver the rest: the completion statuses ``a`` then gets."""
    return _mid_payload(fabric, a, b, lambda: b.c.call(b.c.core.lmr_free(handle)))


def _mid_payload(fabric: Fabric, a: Side, b: Side, act: Callable[[], object]) -> list[int]:
    """``_free_mid_payload`` with ``act`` in place of the free."""
    link = fabric.pipe(a.c.node, b.c.node)
    link.held = True
    fabric.run()
    data = b"".join(link.chunks)
    link.chunks.clear()
    link.deliver(data[:-4])
    act()
    link.deliver(data[-4:])
    link.release()
    fabric.run()
    return [e.status for e in a.events() if e.event_number == EventNumber.DTO_COMPLETION_EVENT]


_FIRST_THEN_REVOKED = [DtoCompletionStatus.DTO_SUCCESS, DtoCompletionStatus.DTO_ERR_REMOTE_ACCESS]


def test_a_batch_whose_key_is_revoked_while_its_bytes_arrive_writes_nothing_there() -> None:
    """The LMR under a batch of Writes is freed while the batch's payload is still arriving
    (its header passed the key checks): none of its bytes reach the process; the batch lands
    through its checks again, and its first Write fails with a remote access error."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    handle, _, rmr_context = own_lmr_handle(b, BASE, 64)
    _batch_to_process(a, 5, lambda _: rmr_context)  # the lone Write, then the batch
    assert _free_mid_payload(fabric, a, b, handle)[:2] == _FIRST_THEN_REVOKED
    held = fabric.processes.buffers[b.c.pid][BASE]
    assert held[:8] == b"\x01" * 8 and held[8:] == bytes(56), "the lone Write's bytes alone"


def test_a_batch_whose_lmr_key_is_revoked_by_the_admin_plane_writes_nothing_there() -> None:
    """The same, with the LMR's rmr_context revoked (`fabricctl fault revoke`) instead of the
    LMR freed: the revoke counts as a key that stopped working, so the batch's plan, made
    before it, no longer holds."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    _, _, rmr_context = own_lmr_handle(b, BASE, 64)
    _batch_to_process(a, 5, lambda _: rmr_context)
    revoke = lambda: b.c.admin("rmr_revoke", [rmr_context])  # noqa: E731
    assert _mid_payload(fabric, a, b, revoke)[:2] == _FIRST_THEN_REVOKED
    held = fabric.processes.buffers[b.c.pid][BASE]
    assert held[:8] == b"\x01" * 8 and held[8:] == bytes(56), "the lone Write's bytes alone"


@pytest.mark.parametrize(
    ("count", "size"),
    [(1, MAX_OP_BYTES + 8), (4, DIRECT_MAX // 3)],
    ids=["a lone WRITE", "a WRITES batch past DIRECT_MAX"],
)
def test_writes_revoked_while_their_bytes_arrive_into_the_mirror_fail_there(
    count: int, size: int
) -> None:
    """Writes too large for the straight path land in the LMR's mirror first: the LMR is
    freed while their bytes arrive (after an 8-byte Write that went before them): none of
    them reaches the process, and the first fails with a remote access error, as on the
    straight path."""
    fabric, a, b = pair(size=count * size)
    fabric.processes.place(b.c.pid, BASE, bytes(64 + count * size))
    handle, _, rmr_context = own_lmr_handle(b, BASE, 64 + count * size)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 0, [BASE, 8, rmr_context], 0)
    for i in range(count):
        remote = [BASE + 64 + size * i, size, rmr_context]
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(size * i, size)], 1 + i, remote, 0)
    assert _free_mid_payload(fabric, a, b, handle)[:2] == _FIRST_THEN_REVOKED
    held = fabric.processes.buffers[b.c.pid][BASE]
    assert held[64:] == bytes(count * size), "nothing of the revoked Writes"


def test_the_writes_of_a_batch_before_one_that_fails_its_key_reach_the_process() -> None:
    """Write 3 of the batch names a key that does not exist: Writes 1 and 2 executed (they
    complete successfully, so their bytes must be in the process), 3 fails, 4.. land nowhere."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    _, rmr_context = own_lmr(b, BASE, 64)
    _batch_to_process(a, 5, lambda i: rmr_context if i != 3 else rmr_context ^ 0x5A5A)
    fabric.run()
    statuses = [e.status for e in a.events() if e.event_number == EventNumber.DTO_COMPLETION_EVENT]
    assert statuses[:4] == [DtoCompletionStatus.DTO_SUCCESS] * 3 + [
        DtoCompletionStatus.DTO_ERR_REMOTE_ACCESS
    ]
    held = fabric.processes.buffers[b.c.pid][BASE]
    assert held[:24] == b"\x01" * 8 + b"\x02" * 8 + b"\x03" * 8
    assert held[24:48] == bytes(24), "nothing of the failed Write or those after it"


def test_a_batch_write_whose_buffer_is_gone_fails_there_and_those_before_it_land() -> None:
    """The process unmapped the buffer of Write 4 of a batch: the transfer of the batch fails,
    the Writes are then written one by one, and the first that cannot be is the error."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(32))
    fabric.processes.place(b.c.pid, BASE + 32, bytes(32))
    lmr_contexts = [own_lmr(b, BASE, 32), own_lmr(b, BASE + 32, 32)]
    fabric.processes.remove(b.c.pid, BASE + 32)
    _batch_to_process(a, 5, lambda i: lmr_contexts[i >= 4][1])
    fabric.run()
    statuses = [e.status for e in a.events() if e.event_number == EventNumber.DTO_COMPLETION_EVENT]
    assert statuses[:5] == [DtoCompletionStatus.DTO_SUCCESS] * 4 + [
        DtoCompletionStatus.DTO_ERR_REMOTE_ACCESS
    ]
    assert fabric.processes.buffers[b.c.pid][BASE] == b"".join(bytes([i + 1]) * 8 for i in range(4))


def _lone_write(fabric: Fabric, a: Side, cookie: int, remote: list[int], data: bytes) -> int:
    """One Write at window 1 from a's segment; its completion's status."""
    a.memory(0, len(data))[:] = data
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, len(data))], cookie, remote, 0)
    fabric.run()
    done = a.events()[0]
    assert (done.event_number, done.cookie) == (EventNumber.DTO_COMPLETION_EVENT, cookie)
    return int(done.status)


def test_lone_writes_into_a_process_take_the_lane_and_reach_it_before_completing() -> None:
    """After the first Write under the key passed its checks the long way, the next lone ones
    land in the target's lane (fabricd/_lanes.c), each put into the process (one put a Write)
    before its ACK leaves."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    _, rmr_context = own_lmr(b, BASE, 64)
    for i in range(4):
        data = bytes([0x41 + i]) * 8
        assert _lone_write(fabric, a, i, [BASE + 8 * i, 8, rmr_context], data) == 0
        assert bytes(fabric.processes.buffers[b.c.pid][BASE][8 * i : 8 * i + 8]) == data
    assert fabric.processes.puts == 3, "the first the long way, the rest in the lane"
    assert fabric.processes.writes == [1, 1, 1, 1], "a transfer each, none twice"


def test_a_buffer_freed_after_writes_took_the_lane_fails_the_next_the_long_way() -> None:
    """The lane's put into the process fails: it stops before the Write, which the long way
    lands again and fails as a remote access error, as before there was a lane."""
    fabric, a, b = pair()
    fabric.processes.place(b.c.pid, BASE, bytes(64))
    _, rmr_context = own_lmr(b, BASE, 64)
    for i in range(2):
        assert _lone_write(fabric, a, i, [BASE, 8, rmr_context], b"in place") == 0
    fabric.processes.remove(b.c.pid, BASE)
    status = _lone_write(fabric, a, 2, [BASE, 8, rmr_context], b"too late")
    assert status == DtoCompletionStatus.DTO_ERR_REMOTE_ACCESS
    assert fabric.processes.puts == 2, "the lane tried the Write once, then left it"
