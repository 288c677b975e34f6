"""fabricd/_plaintake.c, the daemon's intake of the common WQE, against the rules in Python
(proto/plainwqe.plain_run for the WQE, fabricd/nic/views.one_segment for its segment): for
runs of WQEs drawn from every field a rule looks at, and segments under keys that pass or fail
each check, it takes exactly the WQEs the rules accept, up to the first they refuse, with the
same fields, the same bytes and the same run attributes (total, mixed)."""

from __future__ import annotations

import random

import pytest

from fabricd import _plaintake as plaintake
from fabricd.memory import Lmr
from fabricd.nic.objects import Recv
from fabricd.nic.views import one_segment
from proto.batch import MAX_OP_BYTES
from proto.checks import Region
from proto.constants import MemPriv
from proto.hostif import (
    CONSUMER_LINE,
    PRODUCER_LINE,
    SEGMENT,
    SLOTS,
    STAGE_BYTES,
    U32,
    WQE,
    Opcode,
    Ring,
    RingKind,
    format_ring,
    ring_bytes,
    set_u32,
    wqe_size,
)
from proto.plainwqe import COOKIE, FLAGS, PLAIN_RECEIVES, PLAIN_REQUESTS, PlainWqe, plain_run

ENTRIES, SIZE = 8, wqe_size(2)
OWNER, PZ, NEED = 3, 5, int(MemPriv.LOCAL_READ)
BASE = 0x10000
FENCE = 0x08


def _lmr(context: int, owner: int = OWNER, pz: int = PZ, privileges: MemPriv = MemPriv.ALL,
         pid: int = 0, length: int = 4096) -> Lmr:  # fmt: skip
    view = memoryview(bytearray(random.Random(context).randbytes(length)))
    region = Region(BASE + context * 0x10000, length, pz, privileges)
    return Lmr(context, owner, region, "seg", view, context, context + 100, pid=pid)


LMRS = {
    lmr.lmr_context: lmr
    for lmr in (
        _lmr(1),
        _lmr(2),
        _lmr(3, owner=OWNER + 1),  # another consumer's
        _lmr(4, pz=PZ + 1),  # another PZ
        _lmr(5, privileges=MemPriv.LOCAL_WRITE),  # no LOCAL_READ
        _lmr(6, pid=1234),  # a process's own memory
    )
}
STAGE = memoryview(bytearray(random.Random(0).randbytes(STAGE_BYTES)))


def _pick(rng: random.Random, good: list[int], bad: list[int]) -> int:
    """Mostly a value the rules accept, sometimes one they refuse (so runs get long)."""
    return rng.choice(good) if rng.random() < 0.93 else rng.choice(bad)


def _segment(rng: random.Random) -> tuple[int, int, int]:
    """A segment under one of LMRS's keys (or none), inside its range, at an edge or out."""
    context = _pick(rng, [1, 2], [3, 4, 5, 6, 7, U32 - 1])
    start = BASE + context * 0x10000
    length = _pick(rng, [1, 64, 4096], [0, MAX_OP_BYTES + 1, (1 << 64) - 1])
    address = _pick(rng, [start, start + 4096 - length], [start + 64, start - 1, (1 << 64) - 8])
    return address % (1 << 64), length, context


def _wqe(
    rng: random.Random, opcodes: frozenset[int]
) -> tuple[tuple[int, ...], tuple[int, int, int]]:
    opcode = _pick(rng, sorted(opcodes), [1, 2, 3, 4, 5, 7, 0, 63, 200])
    staged = _pick(rng, [0, 1] if opcodes == PLAIN_REQUESTS else [0], [1, 2])
    offset = _pick(rng, [0, 64, STAGE_BYTES - 4096] if staged else [0], [STAGE_BYTES - 1, 8])
    head = (
        opcode,
        staged,
        _pick(rng, [1], [0, 2]),  # num_segments
        _pick(rng, [0, 0x01], [FENCE, 0x40]),  # completion flags
        rng.randrange(1 << 64),  # cookie
        8192,
        64,
        9,
        offset,
        _pick(rng, [0], [1, U32]),  # operand
        _pick(rng, [0], [1]),  # compare
    )
    return head, _segment(rng)


def _ring(wqes: list[tuple[tuple[int, ...], tuple[int, int, int]]]) -> Ring:
    view = memoryview(bytearray(ring_bytes(ENTRIES, SIZE)))
    format_ring(view, RingKind.SQ, ENTRIES, SIZE)
    for i, (head, segment) in enumerate(wqes):
        at = SLOTS + i * SIZE
        WQE.pack_into(view, at, *head)
        SEGMENT.pack_into(view, at + WQE.size, *segment)
    set_u32(view, PRODUCER_LINE, len(wqes))
    set_u32(view, CONSUMER_LINE, 0)
    return Ring(view, ENTRIES, SIZE, producer=False)


def _by_the_rules(
    ring: Ring, opcodes: frozenset[int]
) -> tuple[list[PlainWqe], list[bytes], int, bool]:
    """What the intake takes, by plain_run and one_segment (Initiator.post_plain's rules)."""
    taken, data, total, mixed = [], [], 0, False
    for wqe in plain_run(ring, opcodes):
        raw_op, staged, _, flags, _, _, _, _, at, _, _, address, n, context = wqe
        lmr = one_segment(LMRS, OWNER, PZ, NEED, address, n, context)
        if lmr is None or (lmr.pid and not staged):
            break
        taken.append(wqe)
        data.append(bytes(STAGE[at : at + n] if staged else lmr.local(address, n)))
        total += n
        mixed = mixed or raw_op != taken[0][0] or n > MAX_OP_BYTES or bool(flags & FENCE)
    return taken, data, total, mixed


def _bits(opcodes: frozenset[int]) -> int:
    return sum(1 << op for op in opcodes)


@pytest.mark.parametrize("opcodes", [PLAIN_REQUESTS, PLAIN_RECEIVES], ids=["requests", "recvs"])
def test_take_accepts_exactly_what_the_rules_accept(opcodes: frozenset[int]) -> None:
    rng = random.Random(11)
    accepted = 0
    for _ in range(3000):
        ring = _ring([_wqe(rng, opcodes) for _ in range(rng.randint(1, ENTRIES))])
        want = _by_the_rules(ring, opcodes)
        count = ring.available()
        before = rng.choice([None, LMRS[1], LMRS[3]])  # a hint only: checked again
        wqes, views, total, mixed, last = plaintake.take(
            ring.view,
            SLOTS,
            count,
            SIZE,
            _bits(opcodes),
            LMRS,
            OWNER,
            PZ,
            NEED,
            before,
            STAGE,
        )
        assert (wqes, [bytes(v) for v in views], total, mixed) == want
        passed = last is None or (last.owner, last.region.pz, last.pid) == (OWNER, PZ, 0)
        assert passed or last is LMRS[6], "the hint for the next call is a key that passed"
        assert ring.mine == 0, "take publishes nothing"
        accepted += len(wqes)
    assert accepted > 2000, "the draw reaches the common WQE often"


def test_a_view_is_of_the_lmrs_own_buffer() -> None:
    """Bytes written through a taken view are the LMR's (the Write sends what is there when it
    leaves), and a staged WQE's are the staging area's."""
    lmr = LMRS[2]
    address = lmr.region.address + 100
    ring = _ring([((2, 0, 1, 0, 7, 0, 8, 0, 0, 0, 0), (address, 8, 2)),
                  ((1, 1, 1, 0, 8, 0, 8, 0, 4096, 0, 0), (address, 8, 2))])  # fmt: skip
    wqes, views, *_ = plaintake.take(
        ring.view, SLOTS, 2, SIZE, _bits(PLAIN_REQUESTS), LMRS, OWNER, PZ, NEED, None, STAGE
    )
    assert len(wqes) == 2
    views[0][:] = b"12345678"
    assert bytes(lmr.view[100:108]) == b"12345678"
    views[1][:] = b"abcdefgh"
    assert bytes(STAGE[4096:4104]) == b"abcdefgh"


def test_an_lmrs_fields_are_read_once_and_the_checks_still_hold() -> None:
    """key_of keeps what it read of an LMR in its ``walk_key`` (nothing of it changes once the
    LMR is registered); a take after that checks the same things: another owner or PZ, or a
    privilege the LMR does not grant, is still refused."""
    lmr = _lmr(9, privileges=MemPriv.LOCAL_READ)  # fresh: nothing kept yet
    r = lmr.region
    ring = _ring([((2, 0, 1, 0, 7, 0, 8, 0, 0, 0, 0), (r.address, 8, 9))])
    stretch = (ring.view, SLOTS, 1, SIZE, _bits(PLAIN_REQUESTS), {9: lmr})
    assert lmr.walk_key is None
    assert len(plaintake.take(*stretch, OWNER, PZ, NEED, None, STAGE)[0]) == 1
    kept = lmr.walk_key
    assert isinstance(kept, tuple)
    assert kept[:7] == (OWNER, 0, 9, PZ, r.privilege_bits, r.address, r.end)
    assert kept[7] is lmr.view
    assert len(plaintake.take(*stretch, OWNER, PZ, NEED, lmr, STAGE)[0]) == 1
    assert lmr.walk_key is kept, "read once"
    assert not plaintake.take(*stretch, OWNER + 1, PZ, NEED, None, STAGE)[0]
    assert not plaintake.take(*stretch, OWNER, PZ + 1, NEED, lmr, STAGE)[0]
    assert not plaintake.take(*stretch, OWNER, PZ, int(MemPriv.LOCAL_WRITE), None, STAGE)[0]


def test_slots_outside_the_ring_are_refused_and_bad_arguments_raise() -> None:
    ring = _ring([])
    bits = _bits(PLAIN_REQUESTS)
    with pytest.raises(ValueError, match="outside the ring"):
        plaintake.take(ring.view, SLOTS, ENTRIES + 1, SIZE, bits, LMRS, OWNER, PZ, NEED, None,
                       STAGE)  # fmt: skip
    with pytest.raises(ValueError, match="too small"):
        plaintake.take(ring.view, SLOTS, 1, 16, bits, LMRS, OWNER, PZ, NEED, None, STAGE)
    with pytest.raises(TypeError):
        plaintake.take(ring.view, SLOTS, 1, SIZE, bits, [], OWNER, PZ, NEED, None, STAGE)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        plaintake.take(ring.view, -1, 1, SIZE, bits, LMRS, OWNER, PZ, NEED, None, STAGE)


def test_receives_take_a_key_a_call_and_together_what_the_rules_accept() -> None:
    """receives() (Target.post_recv_plain): a receive into a process's own memory is taken
    too, a call stops where the key changes, and the calls one after the other make exactly
    the receives the rules accept, each under the LMR its call returns: its cookie, flags,
    bytes and capacity, and its span when the LMR is a process's own memory."""
    need, bits = int(MemPriv.LOCAL_WRITE), _bits(PLAIN_RECEIVES)
    rng = random.Random(12)
    crossed = spanned = 0  # rings whose receives took more than one call; spans made
    for _ in range(2000):
        ring = _ring([_wqe(rng, PLAIN_RECEIVES) for _ in range(rng.randint(1, ENTRIES))])
        want = []
        for wqe in plain_run(ring, PLAIN_RECEIVES):
            address, n, context = wqe[11:]
            lmr = one_segment(LMRS, OWNER, PZ, need, address, n, context)
            if lmr is None:
                break
            spans = [(lmr, address, n)] if lmr.pid else []
            want.append((wqe[COOKIE], wqe[FLAGS], bytes(lmr.local(address, n)), n, spans))
        got: list[tuple[object, ...]] = []
        at, count, calls = 0, ring.available(), 0
        while at < count:
            recvs, last = plaintake.receives(
                ring.view, SLOTS + at * SIZE, count - at, SIZE, bits, LMRS, OWNER, PZ, need,
                None, Recv,
            )  # fmt: skip
            if not recvs:
                break
            calls += 1
            buffers = {id(r.views[0].obj) for r in recvs} | {
                id(s[0].view.obj) for r in recvs for s in r.spans
            }
            assert buffers == {id(last.view.obj)}, "one key, the one returned"
            for r in recvs:
                assert len(r.views) == 1
                got.append((r.cookie, r.flags, bytes(r.views[0]), r.capacity, r.spans))
            at += len(recvs)
        assert got == want
        assert ring.mine == 0, "receives publishes nothing"
        crossed += calls > 1
        spanned += any(spans for *_, spans in got)
    assert crossed > 200, "runs cross keys often"
    assert spanned > 10, "the draw reaches receives into a process's memory"


def test_a_receive_is_a_view_of_its_lmr_and_bad_arguments_raise() -> None:
    """A receive's view is its LMR's own buffer (a Send lands there); receives() checks its
    arguments as take() does, and ``make`` must be callable."""
    lmr = LMRS[2]
    address = lmr.region.address + 100
    ring = _ring([((int(Opcode.RECEIVE), 0, 1, 0, 7, 0, 0, 0, 0, 0, 0), (address, 8, 2))])
    need = int(MemPriv.LOCAL_WRITE)
    args = (ring.view, SLOTS, 1, SIZE, _bits(PLAIN_RECEIVES), LMRS, OWNER, PZ, need, None)
    (recv,), last = plaintake.receives(*args, Recv)
    assert last is lmr and recv.spans == []
    recv.views[0][:] = b"12345678"
    assert bytes(lmr.view[100:108]) == b"12345678"
    with pytest.raises(TypeError, match="callable"):
        plaintake.receives(*args, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside the ring"):
        plaintake.receives(ring.view, SLOTS, ENTRIES + 1, *args[3:], Recv)
    with pytest.raises(ValueError, match="too small"):
        plaintake.receives(ring.view, SLOTS, 1, 16, *args[4:], Recv)
    with pytest.raises(TypeError, match="11 arguments"):
        plaintake.receives(*args)  # type: ignore[call-arg]


def test_a_request_in_a_process_is_left_to_the_general_path() -> None:
    """Without ``fetchable``, the bytes of an unstaged request in a process's own memory are
    not taken (the general path fetches them); staged, they are the staging area's."""
    lmr = LMRS[6]
    address = lmr.region.address
    for staged, taken in ((0, 0), (1, 1)):
        head = (2, staged, 1, 0, 7, 0, 8, 0, 0, 0, 0)
        ring = _ring([(head, (address, 8, 6))])
        wqes, *_ = plaintake.take(ring.view, SLOTS, 1, SIZE, _bits(PLAIN_REQUESTS), LMRS, OWNER,
                                  PZ, NEED, None, STAGE)  # fmt: skip
        assert len(wqes) == taken
