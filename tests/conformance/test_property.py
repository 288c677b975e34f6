"""Random programs against a reference model, on real daemons (hypothesis, stateful).

Each program connects one endpoint pair and runs posts (valid or not), receives, disconnects
and kills. The model checks that every cookie completes exactly once and in posting order, that
statuses follow the rules (success until the first error; that error is the invalid access or
the loss of the peer; everything after it is FLUSHED) and that no byte of the target's memory
changes outside the ranges valid writes aimed at.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from client.api import Lmr, Pz, Rmr
from fabricd.launch import Node, start_node
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, EventNumber, MemPriv, MemType
from proto.errors import DatQueueEmpty
from tests.integration.flows import Pair, connect_pair

SIZE = 4096  # the target LMR
GUARD = 512  # bytes of B's buffer before and after the target LMR
AREA = 1024  # A's bytes [0, AREA) are written from, [AREA, 2*AREA) are read into
INITIAL = bytes((i * 7 + 1) & 0xFF for i in range(SIZE + 2 * GUARD))
FAULTS = ("none", "key", "range")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, Node]]:
    tmp = tmp_path_factory.mktemp("model")
    a = start_node("model-a", str(tmp / "a.sock"))
    b = start_node("model-b", str(tmp / "b.sock"))
    yield a, b
    a.stop()
    b.stop()


@dataclass
class Posted:
    """One operation the model expects a completion for."""

    cookie: int
    kind: Dtos
    valid: bool
    target: tuple[int, int] = (0, 0)  # for writes: the range of B's memory aimed at
    status: int | None = None
    key: int = 0  # the rmr_context it used
    maybe: bool = False  # posted before its key was freed or rebound: either outcome is right


@dataclass
class Model:
    """What the program did and what came back."""

    posted: list[Posted] = field(default_factory=list)
    aimed: list[tuple[int, int]] = field(default_factory=list)  # valid write ranges
    broken: bool = False  # observed: an error, a disconnect
    ended: bool = False  # the program disconnected or killed (drives the preconditions)
    killed: bool = False
    next_cookie: int = 1


class FabricProgram(RuleBasedStateMachine):
    """A random program on one connected pair."""

    nodes: tuple[Node, Node]

    def __init__(self) -> None:
        super().__init__()
        a, b = self.nodes
        self.pair: Pair = connect_pair(a.socket, b.socket, b.address, size=SIZE + 2 * GUARD)
        self.pair.view_b[:] = INITIAL
        pz = Pz(self.pair.ia_b, self.pair.ia_b.core.ep_mirror(self.pair.ep_b.handle).pz)
        buffer = self.pair.lmr_b.registered_address + GUARD
        self.target = self.pair.ia_b.lmr_create(MemType.VIRTUAL, buffer, SIZE, pz, MemPriv.ALL)
        self.alias: Lmr | None = self.pair.ia_b.lmr_create(
            MemType.LMR, self.target, 0, pz, MemPriv.ALL
        )
        self.window: Rmr = self.pair.ia_b.rmr_create(pz)
        self.window_range: tuple[int, int] | None = None  # bound: [start, end) of the target
        self.model = Model()
        self.recvs = 0  # receives posted at B
        self.freed_alias_key = 0

    # -- rules ---------------------------------------------------------------------------------

    def _post(self, kind: Dtos, fault: str, offset: int, length: int, via: str) -> None:
        p, m = self.pair, self.model
        cookie = m.next_cookie
        m.next_cookie += 1
        valid = fault == "none"
        address, _, key = self.target.remote(offset, length)
        if via == "alias":
            key = self.alias.rmr_context if self.alias else self.freed_alias_key
            valid = valid and self.alias is not None
        elif via == "window" and self.window_range is not None:
            start, end = self.window_range
            offset = start + offset % max(1, end - start - 1)
            length = max(1, min(length, end - offset))
            address, key = self.target.registered_address + offset, self.window.rmr_context
        if fault == "key":
            key ^= 0x00F0F0F0
        elif fault == "range":  # straddles one end of the target LMR, into the guard band
            address = self.target.registered_address + (
                SIZE - length // 2 if offset % 2 else -(length // 2) - 1
            )
        remote = [address, length, key]
        if kind == Dtos.RDMA_WRITE:
            p.view_a[:length] = bytes([cookie & 0xFF]) * length
            p.ep_a.post_rdma_write([p.lmr_a.triplet(0, length)], cookie, remote)
        else:
            p.ep_a.post_rdma_read([p.lmr_a.triplet(AREA, length)], cookie, remote)
        m.posted.append(Posted(cookie, kind, valid, (offset, offset + length), key=key))
        if kind == Dtos.RDMA_WRITE and valid:
            m.aimed.append((GUARD + offset, GUARD + offset + length))

    def _stale(self, key: int) -> None:
        """Operations already posted with ``key`` may or may not get through (the spec)."""
        for posted in self.model.posted:
            if posted.key == key and posted.status is None:
                posted.maybe = True

    @precondition(lambda self: not self.model.ended)
    @rule(start=st.integers(0, SIZE - 64), length=st.integers(2, 1024))
    def bind(self, start: int, length: int) -> None:
        """Bind (or rebind) the window; its previous key dies."""
        length = min(length, SIZE - start)
        old = self.window.rmr_context
        self.window.bind(
            self.target,
            self.target.triplet(start, length),
            MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE,
            self.pair.ep_b,
        )
        if old:
            self._stale(old)
        self.window_range = (start, start + length)

    @precondition(lambda self: self.alias is not None and not self.model.killed)
    @rule()
    def free_alias(self) -> None:
        """Free the alias LMR: its rmr_context stops working."""
        assert self.alias is not None
        self.freed_alias_key = self.alias.rmr_context
        self.alias.free()
        self.alias = None
        self._stale(self.freed_alias_key)

    @precondition(lambda self: self._room())  # after a disconnect too: posted, then flushed
    @rule(
        fault=st.sampled_from(FAULTS),
        offset=st.integers(0, SIZE - 1),
        length=st.integers(2, 512),
        read=st.booleans(),
        via=st.sampled_from(["lmr", "alias", "window"]),
    )
    def rdma(self, fault: str, offset: int, length: int, read: bool, via: str) -> None:
        length = min(length, SIZE - offset, AREA)
        if length < 2:
            offset, length = 0, 2
        self._post(Dtos.RDMA_READ if read else Dtos.RDMA_WRITE, fault, offset, length, via)

    @precondition(lambda self: not self.model.ended and self._room() and self.recvs < 12)
    @rule(length=st.integers(0, 64), with_receive=st.booleans())
    def send(self, length: int, with_receive: bool) -> None:
        """A send, with or without a receive posted first (receiver not ready: it waits, and
        so does every later operation, until the next receive)."""
        p, m = self.pair, self.model
        if with_receive:
            p.ep_b.post_recv([self.target.triplet(SIZE - 64, 64)], cookie=1000 + self.recvs)
            self.recvs += 1
            m.aimed.append((GUARD + SIZE - 64, GUARD + SIZE))
        cookie = m.next_cookie
        m.next_cookie += 1
        p.ep_a.post_send([p.lmr_a.triplet(0, length)], cookie)
        m.posted.append(Posted(cookie, Dtos.SEND, True))

    @precondition(lambda self: not self.model.ended)
    @rule()
    def disconnect(self) -> None:
        self.pair.ep_a.disconnect()
        self.model.ended = True

    @precondition(lambda self: not self.model.ended)
    @rule()
    def kill_the_target_consumer(self) -> None:
        self.pair.ia_b.close()  # its daemon frees the IA: the peer sees DISCONNECTED
        self.model.ended = self.model.killed = True

    @rule()
    def settle(self) -> None:
        """Let completions arrive (always possible: the program never gets stuck)."""
        self._collect(20_000)

    # -- checks --------------------------------------------------------------------------------

    def _room(self) -> bool:
        return len(self.model.posted) < 14  # never more outstanding than max_request_dtos

    def _collect(self, wait_us: int) -> None:
        """Take the completions that have arrived (waiting up to ``wait_us`` for each)."""
        evd = self.pair.evd_a
        while any(p.status is None for p in self.model.posted):
            try:
                event, _ = evd.wait(wait_us) if wait_us else (evd.dequeue(), 0)
            except (DatQueueEmpty, Exception) as err:
                if isinstance(err, DatQueueEmpty) or "TIMEOUT" in str(err):
                    return
                raise
            if event.event_number != EventNumber.DTO_COMPLETION_EVENT:
                assert event.event_number in (
                    EventNumber.CONNECTION_EVENT_BROKEN,
                    EventNumber.CONNECTION_EVENT_DISCONNECTED,
                )
                self.model.broken = True
                continue
            pending = [p for p in self.model.posted if p.status is None]
            assert event.cookie == pending[0].cookie, "completions come in posting order"
            assert event.cookie not in [p.cookie for p in self.model.posted if p.status is not None]
            pending[0].status = event.status
            if event.status != St.DTO_SUCCESS:
                self.model.broken = True

    @invariant()
    def statuses_follow_the_rules(self) -> None:
        self._collect(0)
        seen_error = False
        for p in self.model.posted:
            if p.status is None:
                continue
            if seen_error:
                assert p.status == St.DTO_ERR_FLUSHED, "after an error everything is FLUSHED"
            elif p.maybe and p.status in (St.DTO_SUCCESS, St.DTO_ERR_REMOTE_ACCESS):
                seen_error = p.status != St.DTO_SUCCESS
            elif p.status == St.DTO_SUCCESS:
                assert p.valid, "an invalid access never succeeds"
            elif p.status != St.DTO_ERR_FLUSHED:
                assert not p.valid and p.status == St.DTO_ERR_REMOTE_ACCESS
                seen_error = True
            else:
                seen_error = True  # a disconnect flushed it

    def teardown(self) -> None:
        try:
            if not self.model.ended:
                self.pair.ep_a.disconnect()
            self._collect(5_000_000)
            missing = [p.cookie for p in self.model.posted if p.status is None]
            assert not missing, f"cookies that never completed: {missing}"
            self.statuses_follow_the_rules()
            if not self.model.killed:
                self._check_target_memory()
        finally:
            self.pair.close()

    def _check_target_memory(self) -> None:
        """No byte outside the ranges valid writes (and receives) aimed at has changed."""
        touched = bytearray(len(INITIAL))
        for start, end in self.model.aimed:
            touched[start:end] = b"\x01" * (end - start)
        memory = bytes(self.pair.view_b)
        for i in range(len(INITIAL)):
            if not touched[i]:
                assert memory[i] == INITIAL[i], f"byte {i} changed outside every target range"


@pytest.mark.timeout(300)
def test_random_programs_against_the_model(nodes: tuple[Node, Node]) -> None:
    FabricProgram.nodes = nodes
    run_state_machine_as_test(
        FabricProgram,
        settings=settings(
            max_examples=30,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
