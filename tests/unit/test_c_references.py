"""The project's C extensions give back every reference they take: over thousands of calls on
each path (taken, declined, raising), the interpreter's live memory blocks do not grow with the
number of calls and the arguments' reference counts end where they began. A reference kept
per call (a missing Py_DECREF on a result, a key, a view or an exception path) leaks one or
more blocks per call, which this sees; a reference given back twice shows as a count below
where it began (or a crash)."""

from __future__ import annotations

import gc
import os
import random
import sys
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from client import _ringpost as ringpost
from client import _ringtake as ringtake
from client.records import Event
from fabricd import _landing as landing
from fabricd import _lanes as lanes
from fabricd import _plaintake as plaintake
from fabricd import _receives as receives
from fabricd.memory import Grant, Lmr, Reach
from fabricd.nic.objects import Recv
from proto import _rows as rows_c
from proto import _scatter as scatter
from proto.codec import encode
from proto.constants import Dtos, MemPriv
from proto.errors import DatError
from proto.eventq import EQ_ENTRY_SIZE
from proto.frames import MAX_HEADER_LEN, FrameType
from proto.hostif import SLOTS, U32, Opcode
from proto.plainwqe import PLAIN_RECEIVES, PLAIN_REQUESTS
from tests.core.test_post_inline import (
    _Counting,
    _marks,
    _posting,
    _posting_through,
    _restore,
    _sides,
)
from tests.unit import test_landing as lt
from tests.unit import test_lanes as lnt
from tests.unit import test_plaintake as pt
from tests.unit import test_receives as rvt
from tests.unit import test_ringtake as tt
from tests.unit import test_rows as rt

CALLS = 3000
WARM = 200


def _raises(kind: type[BaseException], call: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        with pytest.raises(kind):
            call()

    return run


def _live_blocks() -> int:
    gc.collect()
    return sys.getallocatedblocks()


def _check(call: Callable[[], object], *held: object) -> None:
    """``call`` CALLS times: the live blocks grow by less than one per ten calls, and each of
    ``held`` (objects the calls are given) has the reference count it had."""
    for _ in range(WARM):
        call()
    before = _live_blocks()  # after a collection: what cycles held of ``held`` is gone
    counts = [sys.getrefcount(obj) for obj in held]
    for _ in range(CALLS):
        call()
    grown = _live_blocks() - before
    assert grown < CALLS // 10, f"{grown} live blocks more after {CALLS} calls"
    assert [sys.getrefcount(obj) for obj in held] == counts, "references kept or given back"


def _plaintake_cases() -> dict[str, tuple[Callable[[], object], tuple[object, ...]]]:
    address = pt.LMRS[2].region.address + 100
    good = pt._ring([((2, 0, 1, 0, 7, 0, 8, 0, 0, 0, 0), (address, 8, 2)),
                     ((1, 1, 1, 0, 8, 0, 8, 0, 4096, 0, 0), (address, 8, 2))])  # fmt: skip
    refused = pt._ring([((63, 0, 1, 0, 7, 0, 8, 0, 0, 0, 0), (address, 8, 2))])
    bits = pt._bits(PLAIN_REQUESTS)
    hint = pt.LMRS[1]

    def take(ring: Any, count: int, lmrs: Any = pt.LMRS) -> object:
        return plaintake.take(ring.view, SLOTS, count, pt.SIZE, bits, lmrs, pt.OWNER, pt.PZ,
                              pt.NEED, hint, pt.STAGE)  # fmt: skip

    receive = int(Opcode.RECEIVE)
    recvs = pt._ring([((receive, 0, 1, 0, 7, 0, 0, 0, 0, 0, 0), (address, 8, 2)),
                      ((receive, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0), (address, 8, 6))])  # fmt: skip
    need = int(MemPriv.LOCAL_WRITE)

    def receives(count: int, make: Any = Recv) -> object:
        return plaintake.receives(recvs.view, SLOTS, count, pt.SIZE, pt._bits(PLAIN_RECEIVES),
                                  pt.LMRS, pt.OWNER, pt.PZ, need, hint, make)  # fmt: skip

    def no_recv(*_: object) -> None:
        raise RuntimeError("make refused")

    def made(*fields: Any) -> Recv:  # held in Recv's place: a compiled class's instances
        return Recv(*fields)  # keep a reference to it each (mypyc 2.4), not ours to count

    held = (good.view, pt.LMRS, hint, pt.STAGE, pt.LMRS[2])
    return {
        "receives: made": (
            lambda: receives(2, made),
            (recvs.view, pt.LMRS, hint, pt.LMRS[2], made),
        ),
        "receives: make raises": (
            _raises(RuntimeError, lambda: receives(1, no_recv)),
            (recvs.view, pt.LMRS, hint, pt.LMRS[2]),
        ),
        "take: taken": (lambda: take(good, 2), held),
        "take: declined": (lambda: take(refused, 1), (refused.view, pt.LMRS, hint)),
        "take: outside the ring": (
            _raises(ValueError, lambda: take(good, pt.ENTRIES + 1)),
            (good.view, pt.LMRS),
        ),
        "take: not a dict of keys": (_raises(TypeError, lambda: take(good, 1, lmrs=[])), held),
    }


def _landing_cases() -> dict[str, tuple[Callable[[], object], tuple[object, ...]]]:
    start, end = lt.WINDOW.address, lt.WINDOW.address + lt.WINDOW.length
    ops = [(start, lt.KEY, 64), (start + 64, lt.KEY, 4096 - 64)]
    other = [(start, lt.KEY + 1, 64)]
    pairs = [(5, 10), (0, 3), (3, 4), (9, 12)]
    bad_pairs: Any = [(5, 4)]
    not_a_list: Any = ()
    target = lt.LMR.view

    return {
        "views: landed": (lambda: landing.views(ops, lt.KEY, start, end, lt.ORIGIN, target),
                          (ops, target)),
        "views: declined": (lambda: landing.views(other, lt.KEY, start, end, lt.ORIGIN, target),
                            (other, target)),
        "views: not a list": (
            _raises(TypeError,
                    lambda: landing.views(not_a_list, lt.KEY, start, end, lt.ORIGIN, target)),
            (target,),
        ),
        "ranges: merged": (lambda: landing.ranges(ops, lt.KEY), (ops,)),
        "ranges: declined": (lambda: landing.ranges(other, lt.KEY), (other,)),
        "merge: merged": (lambda: landing.merge(pairs), (pairs,)),
        "merge: not pairs": (_raises(TypeError, lambda: landing.merge(bad_pairs)), (bad_pairs,)),
    }  # fmt: skip


def _receives_cases() -> dict[str, tuple[Callable[[], object], tuple[object, ...]]]:
    payload = bytes(range(64)) * 2
    memory = bytearray(256)
    lmr = rvt.PROCESS_LMRS[0]

    def sends() -> object:
        recvs = deque(
            Recv(k, 0, [memoryview(memory)[64 * k : 64 * k + 64]], 64, []) for k in range(4)
        )
        return receives.sends(payload, 0, [64, 64], 0, recvs, [], [], [])

    def outside() -> object:
        recvs = deque([Recv(1, 0, [memoryview(memory)[:64]], 64, [])])
        return receives.sends(payload[:8], 0, [16], 0, recvs, [], [], [])

    def planned() -> object:
        address = lmr.region.address
        recvs = deque(
            Recv(k, 0, [memoryview(memory)[:64]], 64, [(lmr, address + 64 * (k % 2), 64)])
            for k in range(4)
        )  # two Sends back to back in one buffer: one piece; an empty one plans nothing
        return receives.planned(payload, 0, [64, 64, 0], 0, recvs, [], [], [], 0, [])

    def declined() -> object:
        freed = rvt.PROCESS_LMRS[3]
        recvs = deque([Recv(1, 0, [memoryview(memory)[:64]], 64, [(freed, 0, 64)])])
        return receives.planned(payload, 0, [64], 0, recvs, [], [], [], 0, [])

    return {
        "sends: landed": (sends, (payload, memory)),
        "sends: outside the payload": (_raises(ValueError, outside), (payload, memory)),
        "planned: planned": (planned, (payload, lmr)),
        "planned: a freed LMR declined": (declined, (payload,)),
    }


def _lanes_cases() -> dict[str, tuple[Callable[[], object], tuple[object, ...]]]:
    start, payload = lt.WINDOW.address, bytes(range(64))
    lane_target = Lmr(1, 1, lt.LMR.region, "seg", memoryview(bytearray(lt.LENGTH)), 1, 11)
    grants = {lt.KEY: Reach(lt.WINDOW, lane_target).grant()}
    mirror = Lmr(1, 1, lt.LMR.region, "", memoryview(bytearray(lt.LENGTH)), 1, 11, pid=77)
    process_grants = {lt.KEY: Reach(lt.WINDOW, mirror).grant()}
    writes = memoryview(
        b"".join(
            encode(FrameType.WRITE, seq, start, lt.KEY, payload_len=64) + payload[:64]
            for seq in (1, 2)
        )
        + encode(FrameType.ACK, 2)
    )

    def lane(before: Callable[[], None], to: dict[int, Grant] = grants, ok: bool = True) -> object:
        def into(*args: object) -> bool:
            return ok

        return lanes.lane(writes, 0, len(writes), to, 0, before, lnt.WRITE, MAX_HEADER_LEN, into)

    def put_process(length: int) -> object:
        return lanes.put_process(os.getpid(), 8, writes, 0, length)

    def fails() -> None:
        raise RuntimeError("before")

    acks = memoryview(encode(FrameType.ACK, 3) + encode(FrameType.ACK, 9) + writes.tobytes())
    answer = memoryview(encode(FrameType.READ_RESP, 5, payload_len=64) + payload)
    sink = memoryview(bytearray(64))
    request = memoryview(encode(FrameType.READ_REQ, 5, start, lt.KEY, 64, 0))

    def read_resp(seq: int) -> object:
        return lanes.read_resp(answer, 0, len(answer), seq, sink, lnt.READ_RESP, MAX_HEADER_LEN)

    def read_req(kind: int) -> object:
        return lanes.request(request, 0, len(request), kind, 7, MAX_HEADER_LEN)

    return {
        "lane: landed": (lambda: lane(lambda: None), (writes, grants, lane_target.view)),
        "lane: before raised": (_raises(RuntimeError, lambda: lane(fails)),
                                (writes, grants, lane_target.view)),
        "lane: put into a process": (lambda: lane(lambda: None, process_grants),
                                     (writes, process_grants, mirror.view)),
        "lane: put refused": (lambda: lane(lambda: None, process_grants, False),
                              (writes, process_grants, mirror.view)),
        "put_process: unmapped": (lambda: put_process(4), (writes,)),
        "put_process: bad range": (_raises(TypeError, lambda: put_process(1 << 40)), (writes,)),
        "acks": (lambda: lanes.acks(acks, 0, len(acks), 2, 10, lnt.ACK, MAX_HEADER_LEN),
                 (acks,)),
        "read_resp: landed": (lambda: read_resp(5), (answer, sink)),
        "read_resp: another's": (lambda: read_resp(6), (answer, sink)),
        "request: found": (lambda: read_req(lnt.READ_REQ), (request,)),
        "request: another type": (lambda: read_req(lnt.READ_RESP), (request,)),
    }  # fmt: skip


def _scatter_cases() -> dict[str, tuple[Callable[[], object], tuple[object, ...]]]:
    memory = bytearray(4096)
    sink = [memoryview(memory)[0:100], memoryview(memory)[0:0], memoryview(memory)[200:4096]]
    src = bytes(4096)
    read_only = [memoryview(b"read-only")]

    def fill() -> object:
        views, total = scatter.views(sink)
        return scatter.fill(views, src[:total])

    return {
        "views and fill": (fill, (memory, src, *sink)),
        "views: read-only": (_raises(TypeError, lambda: scatter.views(read_only)), (*read_only,)),
        "fill: read-only": (_raises(TypeError, lambda: scatter.fill(list(read_only), src)),
                            (src, *read_only)),
    }  # fmt: skip


def _rows_cases() -> dict[str, tuple[Callable[[], object], tuple[object, ...]]]:
    queue = rt._queue(5)
    rows = [(0, 7, 64), (1, 8, 64), (2, U32 - 1, 0)]
    writes = [(0, 64, 0, 1 << 40, 9)] * 16
    view = queue.view

    def write(rows: Sequence[tuple[int, ...]], mask: int = queue.mask) -> object:
        return rows_c.write_rows(view, queue.mine, mask, EQ_ENTRY_SIZE, 8, rt.EP,
                                 int(Dtos.RDMA_WRITE), rows, 0, 1, 2)  # fmt: skip

    too_long: list[tuple[int, ...]] = [(0, 1, U32)]
    shapeless: list[tuple[int, ...]] = [(1, 2)]
    return {
        "write_rows: written": (lambda: write(rows), (view, rows)),
        "write_rows: outside the queue": (
            _raises(ValueError, lambda: write([(0, 1, 1)] * 16, mask=15)),
            (view,),
        ),
        "write_rows: a length past u32": (_raises(OverflowError, lambda: write(too_long)),
                                          (view, too_long)),
        "pack_writes: packed": (lambda: rows_c.pack_writes(writes, 3, 4, 1), (writes,)),
        "pack_writes: the wrong shape": (
            _raises(TypeError, lambda: rows_c.pack_writes(shapeless, 0, 1, 2)),
            (shapeless,),
        ),
    }  # fmt: skip


def _ringtake_cases() -> dict[str, tuple[Callable[[], object], tuple[object, ...]]]:
    whole, _ = tt._queue(random.Random(9))  # sixteen plain completions
    stopped, _ = tt._queue(random.Random(0))  # six, then another entry
    number, evd = tt.DTO, tt.EVD

    def take(view: memoryview, first: int, count: int, cls: Any = Event) -> object:
        return ringtake.completions(view, first, count, cls, number, evd, 64)

    return {
        "completions: a whole run": (lambda: take(whole, 0, tt.ENTRIES), (whole, number)),
        "completions: up to another entry": (lambda: take(stopped, 0, 9), (stopped, number)),
        "completions: past the ring": (_raises(ValueError, lambda: take(whole, 8, 9)), (whole,)),
        "completions: no class": (_raises(ValueError, lambda: take(whole, 0, 1, 1)), (whole,)),
    }


CASES = {
    **_plaintake_cases(),
    **_landing_cases(),
    **_receives_cases(),
    **_lanes_cases(),
    **_scatter_cases(),
    **_rows_cases(),
    **_ringtake_cases(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_call_keeps_no_reference(case: str) -> None:
    call, held = CASES[case]
    _check(call, *held)


@pytest.mark.parametrize(
    ("kind", "length", "remote"),
    [
        (Dtos.RDMA_WRITE, 64, True),
        (Dtos.RDMA_WRITE, 1 << 20, True),  # past its LMR: declined, the general checks raise
        (Dtos.SEND, 64, False),
        (Dtos.RECEIVE, 64, False),
    ],
    ids=["write", "write past its LMR", "send", "receive"],
)
def test_a_post_keeps_no_reference(
    kind: Dtos, length: int, remote: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """client._ringpost through the client's post, its queue put back after each (so it never
    fills): taken, and declined."""
    a, _, _ = _sides()
    posting = _posting(a)
    counting = _Counting(ringpost)
    _posting_through(monkeypatch, posting, counting)
    address, _, lmr_context = a.triplet(0, 64)
    segments = [[address, length, lmr_context]]
    rmr = a.rmr(0, 64) if remote else None
    marks = _marks(posting, a)
    refused = 0

    def post() -> None:
        nonlocal refused
        try:
            posting.post(kind, a.ep, segments, 7, rmr, 0)
        except DatError:
            refused += 1
        _restore(a, marks)

    _check(post, segments, segments[0], *([rmr] if rmr is not None else []))
    declined = length > 64
    assert counting.took == (0 if declined else WARM + CALLS), "the C post took it"
    assert refused == (WARM + CALLS if declined else 0)
