"""The NIC core in memory: several Nics and their consumers in one process, no socket, no sleep.

A ``Fabric`` owns a manual clock and one FIFO of callbacks; ``add_node`` builds a ``Nic`` whose
shell is this fabric (timers on the manual clock, peer connections as in-memory pipes),
``add_consumer`` opens an IA on a node with the real sans-IO client core (client.core). Streams
carry bytes: what a Channel sends is snapshot at once (as a socket would) and read by the other
side through a real FrameReader, whose payload sinks are the NIC's own. ``run()`` delivers until
nothing is left to do; ``advance(seconds)`` moves the clock and fires what falls due (heartbeat
ticks included). Every frame that crosses a pipe is appended to ``trace``, so a test can show
that the same scenario gives the same frames twice.
"""

from __future__ import annotations

import heapq
import itertools
import mmap
import random
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from client.core import ClientCore, Event
from fabricd.nic import Consumer, Nic, PeerLink
from proto.codec import Frame, FrameReader, decode_header, encode, hello
from proto.constants import Dtos
from proto.errors import ProtocolError
from proto.frames import (
    MAX_PROTOCOL_VERSION,
    MIN_PROTOCOL_VERSION,
    ROLE_ADMIN,
    ROLE_CONSUMER,
    FrameType,
)
from proto.peer_auth import CONNECT, NONCE_BYTES, Transcript, proof
from tests.core.processes import Processes

CLUSTER_KEY = b"the in-memory fabric's cluster key"
"""Every node of a Fabric proves this key to its peers unless a test gives it another (or None)."""

STRANGER = "stranger@10.9.9.9:9"
"""The name a Stranger's HELLO gives by default."""

SHM_BYTES = 64 << 20
"""The simulated /dev/shm: a segment larger than this cannot be created."""

SEGMENT_BASE = 0x7F00_0000_0000
"""Where the first consumer segment lives in its (simulated) address space."""


class Timer:
    """A callback due at a time of the manual clock."""

    def __init__(self, at: float, fn: Callable[[], None]) -> None:
        self.at, self.fn, self.cancelled = at, fn, False

    def cancel(self) -> None:
        self.cancelled = True
        self.fn = _nothing  # what it would have run is let go now, not when its time comes


def _nothing() -> None:
    return None


class Memory:
    """Named segments of bytes: the shared memory of a node (a SegmentMapper)."""

    def __init__(self) -> None:
        self.segments: dict[str, mmap.mmap] = {}  # anonymous: a page costs only once touched
        self.shadows: dict[str, mmap.mmap] = {}

    def map(self, name: str) -> memoryview:
        if name not in self.segments:
            raise FileNotFoundError(name)
        return memoryview(self.segments[name])

    def unmap(self, name: str) -> None:
        pass

    def remove(self, name: str) -> None:
        self.segments.pop(name, None)

    def create(self, name: str, size: int) -> int:
        if size > SHM_BYTES and name not in self.segments:  # as tmpfs would say, in effect
            raise OSError(28, f"no space for {size} bytes in /dev/shm")
        seg = self.segments.get(name)
        if seg is None:
            seg = self.segments[name] = mmap.mmap(-1, size)
        return len(seg)

    def shadow(self, name: str) -> memoryview:
        shadow = self.shadows.get(name)
        if shadow is None:
            shadow = self.shadows[name] = mmap.mmap(-1, len(self.segments[name]))
        return memoryview(shadow)

    def fence(self) -> None:
        """One process: program order is the order."""


class QueueMaps:
    """A consumer's maps of its node's queue segments (client.shm.QueueMaps, in memory)."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def map(self, name: str) -> memoryview:
        return self.memory.map(name)

    def unmap(self, name: str) -> None:
        pass

    def fence(self) -> None:
        """One process: program order is the order."""


@dataclass
class Pipe:
    """One direction of an in-memory stream: bytes in order, then maybe an end."""

    fabric: Fabric
    src: str
    dst: str
    deliver: Callable[[bytes], None]
    ended: Callable[[str], None]
    chunks: deque[bytes] = field(default_factory=deque)
    end: str | None = None
    scheduled: bool = False
    cut: bool = False  # a silent partition: bytes vanish
    held: bool = False  # a slow link: bytes wait (``release`` delivers them)

    def write(self, data: bytes) -> None:
        if self.end is not None or self.cut:
            return
        self.chunks.append(data)
        self._schedule()

    def close(self, reason: str) -> None:
        if self.end is None and not self.cut:  # across a partition even the end is lost
            self.end = reason
            self._schedule()

    def release(self) -> None:
        """Stop holding: what waited is delivered at the next run."""
        self.held = False
        if self.chunks:
            self._schedule()

    def _schedule(self) -> None:
        if not self.scheduled and not self.held:
            self.scheduled = True
            self.fabric.call_soon(self._flush)

    def _flush(self) -> None:
        self.scheduled = False
        data = b"".join(self.chunks)
        self.chunks.clear()
        if data:
            self.deliver(data)
        if self.end is not None:
            reason, self.end = self.end, ""
            if reason:
                self.ended(reason)


class PeerEnd:
    """One daemon's end of a peer stream: a core Channel over two pipes."""

    def __init__(self, fabric: Fabric, node: Node) -> None:
        self.fabric, self.node = fabric, node
        self.link: PeerLink | None = None
        self.out: Pipe | None = None
        self.reader = FrameReader(self._sink)
        self.closed = False
        self.errors: list[str] = []  # protocol errors this end closed the stream for

    @property
    def peer_address(self) -> str:
        return "memory"

    @property
    def peer_pid(self) -> int:
        return 0

    def send(self, header: bytes, payload: Sequence[memoryview] = ()) -> None:
        if self.closed or self.out is None:
            return
        data = b"".join((header, *payload))  # one copy, as a socket write makes
        self.fabric.record(self.out, data)
        self.out.write(data)

    def close(self, reason: str) -> None:
        if not self.closed and self.out is not None:
            self.closed = True
            self.out.close(reason)

    def _sink(self, frame: Frame) -> Any:
        assert self.link is not None
        return self.node.nic.peer_sink(self.link, frame)

    def receive(self, data: bytes) -> None:
        """Bytes from the other daemon: frames go to the NIC, as the shell's stream does."""
        if self.closed or self.link is None:
            return
        try:
            self.reader.feed(data)
            nic = self.node.nic  # sends are unbuffered: nothing to flush, nothing to overtake
            if nic.peer_answer(self.link, self.reader, lambda: None):
                nic.peer_batch_end(self.link)  # lone Writes, answered at once
                return
            nic.peer_lane(self.link, self.reader)
            while not self.closed and (frame := self.reader.next_event()) is not None:
                self.node.nic.peer_frame(self.link, frame)
            self.node.nic.peer_batch_end(self.link)
        except ProtocolError as err:  # as the shell does: this one stream closes
            self.errors.append(str(err))
            self.send(encode(FrameType.ERROR, str(err)))
            self.close(str(err))
            self.node.nic.link_lost(self.link, f"protocol error: {err}")

    def ended(self, reason: str) -> None:
        if self.link is not None:
            self.node.nic.link_lost(self.link, f"stream ended: {reason}")
        self.closed = True


class ConsumerEnd:
    """The daemon's end of a consumer's unix socket: what it sends feeds the client core."""

    def __init__(self, consumer: SimConsumer) -> None:
        self.consumer = consumer
        self.closed = False

    @property
    def peer_address(self) -> str:
        return "memory"

    @property
    def peer_pid(self) -> int:
        return self.consumer.pid

    def send(self, header: bytes, payload: Sequence[memoryview] = ()) -> None:
        if not self.closed:
            self.consumer.core.feed(header + b"".join(bytes(v) for v in payload))

    def close(self, reason: str) -> None:
        """The daemon closes the IA: the consumer sees it lost, and the daemon frees the IA
        when the stream ends (later, as the shell's connection_lost)."""
        if self.closed:
            return
        self.closed = True
        self.consumer.core.lost(reason)
        self.consumer.node.call_soon(self._ended)

    def _ended(self) -> None:
        if self.consumer.state is not None:
            self.consumer.node.nic.consumer_lost(self.consumer.state)
        self.consumer.forget_segments()


class Node:
    """A Nic with its memory, as the fabric's shell for it."""

    def __init__(self, fabric: Fabric, name: str, port: int, **kw: Any) -> None:
        self.fabric, self.name, self.port = fabric, name, port
        self.memory = Memory()
        rng = random.Random(f"{fabric.seed}-{name}")
        kw.setdefault("cluster_key", CLUSTER_KEY)
        kw.setdefault("nonce", lambda: rng.randbytes(16))
        self.nic = Nic(
            name,
            ("10.0.0.1", port),
            self,
            self.memory,
            lambda: rng.getrandbits(32),
            process=fabric.processes,
            **kw,
        )
        self.crashed = False
        self.idled = 0  # work the NIC left to call_idle (moderated wake-ups)
        fabric.call_later(self.nic.heartbeat_interval, self._tick)

    def _tick(self) -> None:
        if not self.crashed:
            self.nic.tick(self.fabric.now())
            self.fabric.call_later(self.nic.heartbeat_interval, self._tick)

    # Shell
    def connect_peer(self, link: PeerLink, host: str, port: int) -> None:
        self.fabric.call_soon(lambda: self.fabric.connect(self, link, port))

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        return self.fabric.call_later(delay, fn)

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.fabric.call_soon(fn)

    def call_next(self, fn: Callable[[], None]) -> None:
        self.fabric.call_next(fn)

    def call_idle(self, fn: Callable[[], None]) -> None:
        self.idled += 1  # no input to drain in memory: it runs soon
        self.fabric.call_soon(fn)

    def crash(self) -> None:
        self.fabric.crash(self)

    def now(self) -> float:
        return self.fabric.now()


class SimConsumer:
    """One IA on a node, driven through the real client core."""

    def __init__(
        self, fabric: Fabric, node: Node, name: str, role: str = ROLE_CONSUMER, open_ia: bool = True
    ) -> None:
        """``open_ia`` False: only the HELLO is sent and delivered (the daemon may refuse it)."""
        self.fabric, self.node, self.name, self.role = fabric, node, name, role
        self.pid = 1000 + fabric.consumers  # its process, as SO_PEERCRED would tell
        self.core = ClientCore(name, QueueMaps(node.memory))
        self.end = ConsumerEnd(self)
        self.state: Consumer | None = None
        self.reader = FrameReader()
        self.segments: list[tuple[int, str, int]] = []  # (address, segment, length)
        self.closed_for = ""  # why the daemon closed this IA (a protocol error), if it did
        self._admin: SimConsumer | None = None
        self.send(hello(role, name))
        fabric.run()
        if not open_ia:
            return
        assert self.core.ready
        if role == ROLE_CONSUMER:
            self.call(self.core.async_evd_create())

    def send(self, data: bytes) -> None:
        """Bytes to the daemon (a frame at a time, as the client writes them)."""
        self.reader.feed(data)
        try:
            while (frame := self.reader.next_event()) is not None:
                self.state = self.node.nic.consumer_frame(self.end, self.state, frame, self.role)
        except ProtocolError as err:  # as the daemon's shell: that one IA closes
            self.closed_for = str(err)
            self.end.close(f"protocol error: {err}")
            if self.state is not None:
                self.node.nic.consumer_lost(self.state)

    def call(self, op: Generator[Any, Any, Any], run: bool = True) -> Any:
        """Drive one operation of the client core to its end (a DatError if it fails).

        The daemon answers a call at once; ``run`` False leaves what the call set in motion
        (frames, events) undelivered, so a test can look at the moment right after it."""
        try:
            call = next(op)
            while True:
                req_id, data = self.core.call_frame(call)
                self.send(data)
                if run:
                    self.fabric.run()
                result = self.core.take_reply(req_id)
                assert result is not None, f"no reply to {call.method}"
                call = op.send(result)
        except StopIteration as stop:
            return stop.value

    def admin(self, method: str, args: list[Any], run: bool = True) -> Any:
        """An admin call to this consumer's node, over an admin connection (as client.faults
        makes on the admin socket)."""
        if self._admin is None:
            self._admin = SimConsumer(self.fabric, self.node, f"{self.name}-admin", ROLE_ADMIN)
        return self._admin.call(self._admin.core.admin(method, args), run)

    def alloc(self, size: int) -> int:
        """Registrable memory: a new segment of the node; returns its address."""
        address = SEGMENT_BASE + 0x1_0000_0000 * len(self.segments)
        segment = f"datfabric-{self.name}-{len(self.segments)}"
        self.node.memory.create(segment, size)
        if self.state is not None:  # handed to the node, as the segment desk takes it over
            self.node.nic.memory.adopt(segment, self.state.id)
        self.segments.append((address, segment, size))
        return address

    def locate(self, address: int, length: int) -> tuple[str, int] | None:
        """The segment and offset of [address, address+length) (client.shm's job)."""
        for base, segment, size in self.segments:
            if base <= address and address + length <= base + size:
                return segment, address - base
        return None

    def view(self, address: int, length: int) -> memoryview:
        """The bytes at an address of this consumer."""
        where = self.locate(address, length)
        assert where is not None
        segment, offset = where
        return memoryview(self.node.memory.segments[segment])[offset : offset + length]

    def events(self, evd: int) -> list[Event]:
        """Take every event queued on an EVD."""
        queue = self.core.evds[evd]
        self.core.refill(queue)
        return [self.core.take(queue) for _ in range(len(queue.queue))]

    def post(self, *args: Any) -> None:
        """Post a DTO (client.core.post's arguments): the WQE, and the doorbell if one is due."""
        post = self.core.post_extended if args[0] >= Dtos.IB_RDMA_WRITE_IMMED else self.core.post
        doorbell = post(*args)
        if doorbell:
            self.send(doorbell)

    def close(self) -> None:
        """The consumer process goes away."""
        if self.state is not None:
            self.node.nic.consumer_lost(self.state)
        self.forget_segments()

    def forget_segments(self) -> None:
        """Its segments go (as the shell removes those of a consumer that is gone)."""
        for _, segment, _ in self.segments:
            self.node.memory.remove(segment)


class Fabric:
    """Nodes, consumers, pipes, and the one clock and queue that run them."""

    def __init__(self, seed: int = 1) -> None:
        self.seed = seed
        self._now = 0.0
        self._soon: deque[Callable[[], None]] = deque()
        self._next: deque[Callable[[], None]] = deque()  # the next loop iteration's
        self._timers: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self.nodes: dict[int, Node] = {}
        self.trace: list[tuple[str, str, str, list[Any], int]] = []
        self.pipes: list[Pipe] = []
        self.consumers = 0  # consumers added (each gets its own name, as IAs have tokens)
        self.processes = Processes()  # every consumer's own memory, by its pid

    # the clock and the queue
    def now(self) -> float:
        return self._now

    def call_soon(self, fn: Callable[[], None]) -> None:
        self._soon.append(fn)

    def call_next(self, fn: Callable[[], None]) -> None:
        self._next.append(fn)

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        timer = Timer(self._now + max(delay, 0.0), fn)
        heapq.heappush(self._timers, (timer.at, next(self._order), timer))
        return timer

    def run(self, limit: int = 1_000_000) -> None:
        """Run callbacks until none is left, loop iteration after loop iteration (timers wait
        for ``advance``)."""
        for _ in range(limit):
            if not self._soon:
                self._soon, self._next = self._next, self._soon  # the next loop iteration
                if not self._soon:
                    return
            self._soon.popleft()()
        raise RuntimeError("the fabric never went quiet")

    def step(self) -> bool:
        """Run this loop iteration's callbacks (and those they ask for soon); the next
        iteration's (``call_next``) become the ones to run. Whether any are left."""
        while self._soon:
            self._soon.popleft()()
        self._soon, self._next = self._next, self._soon
        return bool(self._soon)

    def advance(self, seconds: float) -> None:
        """Move the clock forward, firing every timer that falls due, in time order."""
        end = self._now + seconds
        self.run()
        while self._timers and self._timers[0][0] <= end:
            at, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, at)
            if not timer.cancelled:
                timer.fn()
            self.run()
        self._now = end

    # nodes and consumers
    def add_node(self, name: str, **kw: Any) -> Node:
        port = 7000 + len(self.nodes)
        node = self.nodes[port] = Node(self, name, port, **kw)
        return node

    def add_consumer(self, node: Node, name: str = "") -> SimConsumer:
        self.consumers += 1
        return SimConsumer(self, node, name or f"c{self.consumers}-{node.name}")

    def connect(self, node: Node, link: PeerLink, port: int) -> None:
        """An outgoing stream from ``node`` to the node on ``port`` (or none listens there)."""
        other = self.nodes.get(port)
        if other is None or other.crashed:
            node.nic.link_failed(link, f"nothing listens on port {port}")
            return
        a, b = PeerEnd(self, node), PeerEnd(self, other)
        a.out = Pipe(self, node.name, other.name, b.receive, b.ended)
        b.out = Pipe(self, other.name, node.name, a.receive, a.ended)
        self.pipes += [a.out, b.out]
        a.link = link
        b.link = other.nic.peer_accepted(b)
        node.nic.link_up(link, a)

    def dial(self, node: Node) -> Stranger:
        """A stream to ``node``'s peer port from a program that is no node of this fabric."""
        stranger = Stranger(self)
        end = PeerEnd(self, node)
        end.out = Pipe(self, node.name, "stranger", stranger.receive, stranger.ended)
        stranger.pipe = Pipe(self, "stranger", node.name, end.receive, end.ended)
        self.pipes += [end.out, stranger.pipe]
        end.link = stranger.link = node.nic.peer_accepted(end)
        stranger.end = end
        return stranger

    def forget_history(self) -> None:
        """Let go of what a long run piles up: the pipes whose stream ended, the trace, and
        the cancelled timers (a clock that never advances keeps every one)."""
        self.pipes = [p for p in self.pipes if p.end is None]
        self.trace.clear()
        self._timers = [entry for entry in self._timers if not entry[2].cancelled]
        heapq.heapify(self._timers)

    def pipe(self, src: Node, dst: Node) -> Pipe:
        """The newest stream direction from ``src`` to ``dst``."""
        return next(p for p in reversed(self.pipes) if (p.src, p.dst) == (src.name, dst.name))

    def partition(self, x: Node, y: Node, cut: bool = True) -> None:
        """Silently lose every byte (and stream end) between two nodes (or heal that)."""
        for pipe in self.pipes:
            if {pipe.src, pipe.dst} == {x.name, y.name}:
                pipe.cut = cut

    def crash(self, node: Node) -> None:
        """A node dies: its streams end for the peers, nothing more comes from it."""
        node.crashed = True
        for pipe in self.pipes:
            if pipe.src == node.name:
                pipe.chunks.clear()
                pipe.close("peer crashed")

    def record(self, pipe: Pipe, data: bytes) -> None:
        """One frame crossing a pipe, for the trace."""
        hlen = int.from_bytes(data[:4], "big")
        frame = decode_header(data[4 : 4 + hlen])
        self.trace.append((pipe.src, pipe.dst, frame.type.name, frame.fields, frame.payload_len))

    def frames(self, kind: FrameType) -> Iterator[tuple[str, str, list[Any]]]:
        """The traced frames of one type: (src, dst, fields)."""
        for src, dst, name, fields, _ in self.trace:
            if name == kind.name:
                yield src, dst, fields


def inject(pipe: Pipe, ftype: FrameType, *fields: Any, payload: bytes = b"") -> None:
    """Put a frame on a pipe as if the sending daemon had sent it (a duplicate, garbage)."""
    pipe.write(encode(ftype, *fields, payload_len=len(payload)) + payload)


@dataclass
class Stranger:
    """The far end of ``Fabric.dial``: what it sends is the test's, what it hears is kept."""

    fabric: Fabric
    pipe: Pipe | None = None
    end: PeerEnd | None = None
    link: PeerLink | None = None
    heard: list[Frame] = field(default_factory=list)
    closed: str = ""  # why the node ended the stream
    name: str = STRANGER  # the name its HELLO gave
    reader: FrameReader = field(default_factory=FrameReader)

    def send(self, ftype: FrameType, *fields: Any, payload: bytes = b"") -> None:
        assert self.pipe is not None
        inject(self.pipe, ftype, *fields, payload=payload)

    def hello(self, name: str = STRANGER) -> None:
        """Say HELLO as a peer daemon named ``name`` would."""
        self.name = name
        self.send(FrameType.HELLO, MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION, "peer", name)
        self.fabric.run()

    def authenticate(self, key: bytes = CLUSTER_KEY) -> None:
        """After ``hello``: the connecting side's part of the challenge-response, with ``key``."""
        nonce = bytes(NONCE_BYTES)
        self.send(FrameType.AUTH, nonce, b"")
        self.fabric.run()
        hello_back, answer = self.heard[-2:]
        t = Transcript(nonce, answer.fields[0], self.name, hello_back.fields[3])
        self.send(FrameType.AUTH, b"", proof(key, CONNECT, t))
        self.fabric.run()

    def receive(self, data: bytes) -> None:
        self.reader.feed(data)
        while (frame := self.reader.next_event()) is not None:
            self.heard.append(frame)

    def ended(self, reason: str) -> None:
        self.closed = reason
