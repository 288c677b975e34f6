"""Hostile input by the hundred thousand, in memory: a seeded generator feeds each plane of a
node (consumer calls and frames, peer frames before and after the cluster key is proved,
work-queue entries, and receive entries in a shared receive queue's ring) while an established
pair beside it keeps writing and checking its bytes.

Every input must end as one of: an answer, a DAT_RETURN, an error completion, or one closed
connection with a ProtocolError. Anything else a handler raises reaches the test (the shell
would log it as a traceback), the core logs nothing at ERROR (a handler's bug it caught), and
no byte of the pair's memory changes but the ones the pair wrote.

``DATFABRIC_FUZZ_INPUTS`` sets the inputs per plane (100,000 by default, the CI run;
``make fuzz`` runs 1,000,000 per plane); ``DATFABRIC_FUZZ_SEED`` the seed (a failure prints the
seed and the input's number, and the same seed replays it). The planes run two at a time in
forked child processes (the ``planes`` fixture); each plane's test reads its child's outcome.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import random
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, NamedTuple

import pytest

from proto.codec import encode
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, PspFlags
from proto.constants import EventNumber as E
from proto.frames import FIELDS, FrameType
from proto.hostif import PRODUCER_LINE, SEGMENT, WQE, Opcode, Ring, set_u32
from proto.schema import fields
from tests.core.flows import Side, connect, side
from tests.core.harness import Fabric, Node, Stranger

INPUTS = int(os.environ.get("DATFABRIC_FUZZ_INPUTS", "100000"))
SEED = int(os.environ.get("DATFABRIC_FUZZ_SEED", "20261125"))
CHECK_EVERY = 2_000  # inputs between two checked writes of the live pair
PATTERN = 64  # bytes the pair writes at each check

INTS = (0, 1, -1, 7, 255, 256, 4096, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1,
        -(2**63), 2**64 - 1)  # fmt: skip


def value(rng: random.Random, depth: int = 0) -> Any:
    """Any msgpack value, biased to the edges handlers must refuse."""
    kind = rng.randrange(10 if depth < 2 else 7)
    if kind == 0:
        return rng.choice(INTS)
    if kind == 1:
        return rng.randrange(-(2**63), 2**64)
    if kind == 2:
        return rng.choice(["", "x", "node", "0" * rng.randrange(300), "\u00e9\U0001f600"])
    if kind == 3:
        return rng.randbytes(rng.choice((0, 1, 16, 40, 64, 300)))
    if kind == 4:
        return rng.choice((None, True, False))
    if kind == 5:
        return rng.choice((0.5, -1.0, float("nan"), float("inf")))
    if kind == 6:
        return rng.randrange(16)
    if kind in (7, 8):
        return [value(rng, depth + 1) for _ in range(rng.randrange(6))]
    return {str(value(rng, depth + 1)): value(rng, depth + 1) for _ in range(rng.randrange(3))}


def frame_fields(rng: random.Random, ftype: FrameType) -> list[Any]:
    """The frame's fields: mostly the right number, of random values."""
    n = len(FIELDS[ftype]) if rng.random() < 0.9 else rng.randrange(6)
    return [value(rng) for _ in range(n)]


def frame(rng: random.Random, types: Sequence[FrameType]) -> bytes:
    """One frame of a random type from ``types`` (sometimes raw garbage), with its payload."""
    if rng.random() < 0.03:
        return rng.randbytes(rng.randrange(1, 64))
    ftype = rng.choice(types)
    payload = rng.randbytes(rng.choice((0, 0, 1, 8, 64, 300)))
    return encode(ftype, *frame_fields(rng, ftype), payload_len=len(payload)) + payload


class Live:
    """The established pair beside the fuzzing: writes a fresh pattern and checks every byte
    of the target's memory (the pattern where it wrote, the last pattern elsewhere)."""

    def __init__(self) -> None:
        self.fabric = Fabric()
        n1, n2 = self.fabric.add_node("n1"), self.fabric.add_node("n2")
        self.a, self.b = side(self.fabric, n1), side(self.fabric, n2)
        psp = self.b.c.call(self.b.c.core.psp_create(1, self.b.evd, PspFlags.CONSUMER))
        connect(self.fabric, self.a, self.b, psp=False)
        self.b.c.call(self.b.c.core.psp_free(psp))  # strangers find no listener
        self.expected = bytearray(self.b.memory())
        self.round = 0

    def check(self) -> None:
        self.round += 1
        at = (self.round * PATTERN) % self.b.size
        data = bytes((self.round + i) % 251 for i in range(PATTERN))
        self.a.memory(at, PATTERN)[:] = data
        self.a.c.post(Dtos.RDMA_WRITE, self.a.ep, [self.a.triplet(at, PATTERN)], self.round,
                      self.b.rmr(at, PATTERN), 0)  # fmt: skip
        self.fabric.run()
        self.expected[at : at + PATTERN] = data
        assert self.a.log() == [(E.DTO_COMPLETION_EVENT, self.round, St.DTO_SUCCESS, PATTERN)]
        assert self.b.log() == [], "the target of the pair heard something"
        assert bytes(self.b.memory()) == bytes(self.expected), "a byte changed under the pair"


def fuzz(plane: Callable[[Live, random.Random], Iterator[bool]], seed: int) -> int:
    """Run ``INPUTS`` inputs of ``plane``; returns how many streams they closed."""
    live = Live()
    rng = random.Random(seed)
    inputs = plane(live, rng)
    closed = 0
    gc.freeze()  # what lives already (the suite, the pair): no collection walks it again
    try:
        for n in range(INPUTS):
            try:
                closed += bool(next(inputs))
            except AssertionError:
                raise
            except Exception as err:
                raise AssertionError(f"seed {seed}, input {n}: {err!r}") from err
            if n % CHECK_EVERY == 0:
                live.check()
                live.fabric.forget_history()  # the trace alone made 100,000 inputs 3 x slower
        live.check()
    finally:
        gc.unfreeze()
    return closed


# -- the consumer plane -----------------------------------------------------------------------

CALLS = ["pz_create", "pz_free", "evd_create", "ep_create", "lmr_create", "rmr_create",
         "ep_connect", "psp_create", "cr_accept", "ia_query", "no_such_call", "node_crash",
         "fault_add"]  # fmt: skip


def typed(rng: random.Random, record: type[tuple[object, ...]]) -> list[Any]:
    """Arguments of ``record``'s shape: each field a value of its type when one is drawn in a
    few tries (small integers often: they name live handles, this consumer's and others')."""
    out = []
    for spec in fields(record):
        for _ in range(30):
            v = rng.randrange(300) if rng.random() < 0.5 else value(rng)
            if spec.check(v):
                break
        out.append(v)
    return out


def consumer_plane(live: Live, rng: random.Random) -> Iterator[bool]:
    """CALLs (known and unknown methods; arguments of the call's types, or of any shape),
    DOORBELLs, and frames of the other types."""
    node = live.a.c.node
    nic_calls = sorted(node.nic.calls)
    consumer = live.fabric.add_consumer(node)
    types = [t for t in FrameType if t is not FrameType.HELLO]
    while True:
        if rng.random() < 0.7:
            method = rng.choice(nic_calls if rng.random() < 0.9 else CALLS)
            if method in node.nic.calls and rng.random() < 0.7:
                args: Any = typed(rng, node.nic.calls[method][0])
            else:
                args = [value(rng) for _ in range(rng.randrange(7))]
            data = encode(FrameType.CALL, rng.randrange(1, 2**31), method, args)
        else:
            data = frame(rng, types)
        consumer.send(data)
        live.fabric.run()
        gone = bool(consumer.closed_for)
        if gone or len(node.nic.consumers) > 64:
            if not gone:
                consumer.close()
                live.fabric.run()
            consumer = live.fabric.add_consumer(node)
        yield gone


# -- the peer plane ---------------------------------------------------------------------------

PEER_TYPES = [t for t in FrameType if t >= 0x80] + [FrameType.ERROR, FrameType.AUTH]


def _dial(live: Live, rng: random.Random) -> Stranger:
    node = live.b.c.node
    s = live.fabric.dial(node)
    if rng.random() < 0.8:
        s.hello()
        if rng.random() < 0.8:  # an insider: it holds the key, and turns hostile once in
            s.authenticate()
            assert not s.closed, s.heard
    return s


def peer_plane(live: Live, rng: random.Random) -> Iterator[bool]:
    """Frames of every peer type (and a few others) on a stream to the pair's target node:
    before HELLO, after it, and after a stranger that holds the key proved it."""
    s = _dial(live, rng)
    sent = 0
    while True:
        data = frame(rng, PEER_TYPES if rng.random() < 0.95 else list(FrameType))
        assert s.pipe is not None
        s.pipe.write(data)
        live.fabric.run()
        sent += 1
        gone = bool(s.closed)
        if gone or sent > 200:
            s.pipe.close("done")  # as a program closes its socket once the node ended the
            live.fabric.run()  # stream (a half-open one's pipe and reader were never let go)
            s, sent = _dial(live, rng), 0
        yield gone


# -- the rings --------------------------------------------------------------------------------

OPCODES = [int(op) for op in Opcode] + [0, 9, 255]
SQ_OPCODES = [op for op in Opcode if op != Opcode.RECEIVE]
OPERANDS = (0, 1, 0x12345, 2**32 - 1, 2**32, 2**64 - 1)
EXTENDED = (Opcode.FETCH_ADD, Opcode.CMP_SWAP, Opcode.RDMA_WRITE_IMM)  # the opcodes with operands


def _ring_side(live: Live, rng: random.Random) -> tuple[Side, Side | None, Ring]:
    """A consumer beside the pair's initiator whose EP is connected to one beside the target
    (so requests reach the wire), or, one time in four, left unconnected."""
    s, t = side(live.fabric, live.a.c.node), None
    if rng.random() < 0.75:
        t = side(live.fabric, live.b.c.node)
        psp = t.c.call(t.c.core.psp_create(2, t.evd, PspFlags.CONSUMER))
        connect(live.fabric, s, t, conn_qual=2, psp=False)
        t.c.call(t.c.core.psp_free(psp))
    sq, _ = s.c.core.queues(s.c.core.eps[s.ep])
    return s, t, sq


def _entry(rng: random.Random, s: Side, live: Live, sq: Ring) -> None:
    """A WQE at the producer's next slot: mostly a plausible one (a real opcode, a few
    segments; the remote and the segments' ranges at and past their edges, in this consumer's
    LMR, the pair's memory, or anywhere), now and then one wild in every field."""
    at = sq.slot(sq.mine)
    wild = rng.random() < 0.1
    nseg = rng.choice((0, 17, 65535)) if wild else rng.choice((1, 1, 2, 3))
    opcode = rng.choice(OPCODES) if wild else rng.choice(SQ_OPCODES)
    remote = rng.choice([live.b.rmr(), live.a.rmr(), s.rmr(), [rng.randrange(2**64), 64, 7]])
    WQE.pack_into(sq.view, at, opcode, rng.choice((1, 2, 255)) if wild else 0, nseg & 0xFFFF,
                  rng.choice((0, 1, 2, 8, 2**32 - 1)), rng.randrange(2**64),
                  (remote[0] + rng.choice((0, 1, -1, 4096))) % 2**64,
                  rng.choice((0, 1, 64, 4096, 2**64 - 1)), remote[2] if rng.random() < 0.8
                  else rng.randrange(2**32), 64 if wild else 0,
                  rng.choice(OPERANDS) if opcode in EXTENDED or wild else 0,
                  rng.choice(OPERANDS) if opcode == Opcode.CMP_SWAP or wild else 0)  # fmt: skip
    targets = [(s.address, s.size, s.lmr.lmr_context), live.b.triplet(), live.a.triplet()]
    for i in range(min(nseg, 16)):
        address, length, context = rng.choice(targets)
        off = rng.choice((0, 0, 1, length - 1, length, -1))
        SEGMENT.pack_into(sq.view, at + WQE.size + i * SEGMENT.size,
                          (address + off) % 2**64, rng.choice((0, 1, 64, length, 2**64 - 1)),
                          context if rng.random() < 0.9 else rng.randrange(2**32))  # fmt: skip


def ring_plane(live: Live, rng: random.Random) -> Iterator[bool]:
    """Work-queue entries of random fields (and now and then a wild producer index) on an EP
    of a consumer beside the pair's initiator, followed by the doorbell."""
    s, t, sq = _ring_side(live, rng)
    rotations = 0
    while True:
        if rng.random() < 0.02:
            set_u32(sq.view, PRODUCER_LINE, rng.randrange(2**32))
        else:
            _entry(rng, s, live, sq)
            sq.publish()
        s.c.send(encode(FrameType.DOORBELL, s.ep))
        live.fabric.run()
        s.events()  # taken, so the EVD never overflows
        gone = bool(s.c.closed_for)
        if gone:
            if t is not None:  # its queues go with it
                t.c.close()
            live.fabric.run()
            rotations += 1
            if rotations % 16 == 0:  # a closed IA's queues (8 MB each here) are in cycles
                live.fabric.forget_history()
                gc.collect()
            s, t, sq = _ring_side(live, rng)
        yield gone


def _srq_side(live: Live) -> tuple[Side, Side, int, Ring]:
    """A consumer beside the pair's target whose EP takes its receives from an SRQ, connected
    from one beside the initiator (whose Sends consume them)."""
    s = side(live.fabric, live.a.c.node)
    t = side(live.fabric, live.b.c.node)
    core = t.c.core
    srq = t.c.call(core.srq_create(t.pz, 64, 2, 0))
    ep = t.c.call(core.ep_create_with_srq(t.pz, t.evd, t.evd, t.evd, srq, None))
    t = Side(t.c, t.pz, t.evd, ep, t.address, t.size, t.lmr)
    psp = t.c.call(core.psp_create(3, t.evd, PspFlags.CONSUMER))
    connect(live.fabric, s, t, conn_qual=3, psp=False)
    t.c.call(core.psp_free(psp))
    return s, t, srq, core.srq(srq).ring


def srq_plane(live: Live, rng: random.Random) -> Iterator[bool]:
    """Receive entries of random fields in an SRQ's ring (now and then a wild producer
    index), followed by the doorbell naming the SRQ; now and then a Send that takes one."""
    s, t, srq, ring = _srq_side(live)
    while True:
        if rng.random() < 0.02:
            set_u32(ring.view, PRODUCER_LINE, rng.randrange(2**32))
        else:
            _receive_entry(rng, t, live, ring)
            ring.publish()
        t.c.send(encode(FrameType.DOORBELL, srq))
        if rng.random() < 0.3 and not s.c.closed_for:
            s.c.post(Dtos.SEND, s.ep, [s.triplet(0, rng.choice((0, 1, 64, 4096)))], 1, None, 0)
        live.fabric.run()
        s.events()
        t.events()  # taken, so the EVDs never overflow
        gone = bool(t.c.closed_for)
        if gone:
            s.c.close()
            live.fabric.run()
            live.fabric.forget_history()
            s, t, srq, ring = _srq_side(live)
        yield gone


def _receive_entry(rng: random.Random, t: Side, live: Live, ring: Ring) -> None:
    """A RECEIVE at the producer's next slot: mostly plausible (this consumer's LMR at and
    past its edges, or another's), now and then wild in every field."""
    wild = rng.random() < 0.1
    nseg = rng.choice((0, 3, 17, 65535)) if wild else rng.choice((0, 1, 1, 2))
    opcode = rng.choice(OPCODES) if wild else Opcode.RECEIVE
    WQE.pack_into(ring.view, ring.slot(ring.mine), opcode, rng.choice((1, 255)) if wild else 0,
                  nseg & 0xFFFF, rng.choice((0, 1, 2**32 - 1)), rng.randrange(2**64), 0, 0, 0,
                  64 if wild else 0, rng.choice(OPERANDS) if wild else 0, 0)  # fmt: skip
    targets = [(t.address, t.size, t.lmr.lmr_context), live.b.triplet(), live.a.triplet()]
    for i in range(min(nseg, 16)):
        address, size, context = rng.choice(targets)
        offset = rng.choice((0, 1, size - 1, size, size + 4096))
        length = rng.choice((0, 1, 64, size, 2**32 - 1))
        SEGMENT.pack_into(ring.view, ring.slot(ring.mine) + WQE.size + i * SEGMENT.size,
                          (address + offset) % 2**64, length, context)  # fmt: skip


PLANES = {"consumer": consumer_plane, "peer": peer_plane, "rings": ring_plane, "srq": srq_plane}
LONGEST_FIRST = ("srq", "rings", "peer", "consumer")  # as they ran one after another here
HOSTILE = "test_hostile_input_never_escapes_and_the_pair_runs_on"


class Outcome(NamedTuple):
    """What a plane's run in a child process ends with."""

    closed: int  # streams its inputs closed
    errors: list[str]  # what the core logged at ERROR (a handler's bug it caught)
    failure: str  # the traceback of what escaped, or ""


class _Errors(logging.Handler):
    """The messages of the records at ERROR and above."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run_plane(plane: str) -> Outcome:
    """One plane's whole run (in a child process of the pool below)."""
    errors, log = _Errors(), logging.getLogger("fabricd")
    log.addHandler(errors)
    log.setLevel(logging.ERROR)  # a child's: what the test reads, and nothing else
    try:
        return Outcome(fuzz(PLANES[plane], SEED + sorted(PLANES).index(plane)), errors.messages, "")
    except BaseException:  # all of it goes back to the test, as text
        return Outcome(0, errors.messages, traceback.format_exc())
    finally:
        log.removeHandler(errors)


@pytest.fixture(scope="module")
def planes(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[Outcome]]]:
    """The selected planes, run two at a time in forked children (each plane is one core's
    work with nothing to wait for: on two cores the four take the time of the longest two),
    the longest first."""
    chosen = {
        item.callspec.params["plane"]
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == HOSTILE
    }
    context = multiprocessing.get_context("fork")  # the in-memory core runs no thread
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        yield {p: pool.submit(run_plane, p) for p in LONGEST_FIRST if p in chosen}


@pytest.mark.fuzz
@pytest.mark.timeout(0)  # the run's length is set by DATFABRIC_FUZZ_INPUTS
@pytest.mark.parametrize("plane", sorted(PLANES))
def test_hostile_input_never_escapes_and_the_pair_runs_on(
    plane: str, planes: dict[str, Future[Outcome]]
) -> None:
    outcome = planes[plane].result()
    if outcome.failure:
        pytest.fail(outcome.failure, pytrace=False)
    assert outcome.errors == []
    assert outcome.closed > 0, "the generator never made a stream close: it tests nothing"


def test_the_fuzzer_finds_a_handler_that_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite has teeth: a peer handler that raises something other than a ProtocolError
    is reported with its seed and input number."""
    fabric = Fabric()
    node: Node = fabric.add_node("n")
    handlers = node.nic.peer_frames

    def broken(*_: object) -> None:
        raise KeyError("a handler bug")

    monkeypatch.setitem(handlers, FrameType.HEARTBEAT, broken)
    monkeypatch.setattr(Live, "__init__", _live_on(fabric, node))
    monkeypatch.setattr(Live, "check", lambda self: None)
    with pytest.raises(AssertionError, match=r"seed 1, input \d+: KeyError"):
        fuzz(_heartbeats_after_auth, 1)


def _live_on(fabric: Fabric, node: Node) -> Callable[[Live], None]:
    def init(self: Live) -> None:
        self.fabric = fabric
        self.b = side(fabric, node)

    return init


def _heartbeats_after_auth(live: Live, rng: random.Random) -> Iterator[bool]:
    s = live.fabric.dial(live.b.c.node)
    s.hello()
    s.authenticate()
    while True:
        s.send(FrameType.HEARTBEAT)
        live.fabric.run()
        yield False
