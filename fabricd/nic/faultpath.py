"""The fault path: what the rules make of one outgoing peer message, as values.

``decide_send`` returns the decisions for a message (send it now or later, fail its request,
reset the link, or nothing at all: blackholed); the wire carries them out. The RC layer retries
a lost request or read response up to RETRY_COUNT times, each retry a new message decided anew;
past that the request fails with DTO_ERR_TRANSPORT (a lost response resets the link). One small
function per action.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fabricd.faults import FaultEngine, Message, chance
from fabricd.nic.objects import REQUESTS, PeerLink
from proto.codec import Frame, decode_header, encode
from proto.constants import DtoCompletionStatus as St
from proto.faultrules import RETRY_COUNT, Rule
from proto.frames import FrameType
from proto.hostif import ATOMIC_BYTES


@dataclass(frozen=True, slots=True)
class Emit:
    """Send this header and payload, ``delay`` seconds from now (the link keeps its order)."""

    header: bytes
    payload: Sequence[memoryview]
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class FailRequest:
    """The request ``seq`` is done with an error: it breaks its EP when it retires."""

    seq: int | None
    status: St


@dataclass(frozen=True, slots=True)
class Reset:
    """Reset the link (both ends see their stream end)."""

    reason: str


Decision = Emit | FailRequest | Reset

_OPS = {
    FrameType.WRITE: "RDMA_WRITE",
    FrameType.READ_REQ: "RDMA_READ",
    FrameType.SEND: "SEND",
    FrameType.READ_RESP: "READ_RESP",
    FrameType.ATOMIC: "ATOMIC",
    FrameType.ATOMIC_RESP: "ATOMIC_RESP",
    FrameType.WRITE_IMM: "RDMA_WRITE_IMMED",
    FrameType.ACK: "ACK",
    FrameType.NAK: "ACK",
    FrameType.HEARTBEAT: "HEARTBEAT",
}
_RETRIED = REQUESTS | {FrameType.READ_RESP, FrameType.ATOMIC_RESP}
_ADDRESSED = frozenset({FrameType.WRITE, FrameType.READ_REQ, FrameType.ATOMIC, FrameType.WRITE_IMM})
"""Requests whose header names a remote address (fields 1) and rmr_context (fields 2)."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One transmission of a message that a rule fired on."""

    engine: FaultEngine
    link: PeerLink
    frame: Frame
    header: bytes
    payload: Sequence[memoryview]
    rule: Rule
    msg: Message
    now: float

    def draw(self, salt: int) -> float:
        """A reproducible number in [0, 1) for this attempt (``salt`` keeps uses apart)."""
        m = self.msg
        return chance(self.engine.seed + salt, self.rule.name, m.src, m.dst, m.connection, m.number)

    def sent(self, delay: float = 0.0) -> list[Decision]:
        """The message goes out unchanged (after ``delay``)."""
        return [Emit(self.header, self.payload, delay)]

    def failed(self, status: St) -> list[Decision]:
        """A request completes with ``status``; anything else goes out unchanged."""
        if self.frame.type in REQUESTS and self.link.ep is not None:
            return [FailRequest(_fault_view(self.frame)[1], status)]
        return self.sent()


Outcome = list[Decision] | None
"""The decisions, or None: the message was lost, the RC layer sends it again."""


def _lost(a: Attempt) -> Outcome:
    return None


def _blackhole(a: Attempt) -> Outcome:
    return []


def _delay(a: Attempt) -> Outcome:
    return a.sent(a.engine.jitter(a.rule, a.msg))


def _bandwidth(a: Attempt) -> Outcome:
    link = a.link
    link.busy_until = max(link.busy_until, a.now) + (a.msg.size or 64) / (a.rule.rate_MBps * 1e6)
    return a.sent(link.busy_until - a.now)


def _duplicate(a: Attempt) -> Outcome:
    return a.sent() + a.sent()


def _reset(a: Attempt) -> Outcome:
    return [Reset(f"fault rule {a.rule.name}: reset")]


def _status(a: Attempt) -> Outcome:
    return a.failed(St(a.rule.status))


def _rnr(a: Attempt) -> Outcome:
    return a.failed(St.DTO_ERR_RECEIVER_NOT_READY)


def _corrupt(a: Attempt) -> Outcome:
    """Detected: lost (retried). Silent: a flipped address bit of an RDMA request's header
    (the access lands elsewhere, or is refused) or a flipped payload byte lands."""
    kind, rule = a.frame.type, a.rule
    if rule.silent and rule.part == "header" and kind in _ADDRESSED:
        fields = list(a.frame.fields)
        fields[1] ^= 1 << (3 + int(a.draw(3) * 6))
        a.engine.record(rule, a.msg, address=fields[1], was=a.frame.fields[1])
        return [Emit(encode(kind, *fields, payload_len=a.frame.payload_len), a.payload)]
    if rule.silent and rule.part == "payload" and a.payload:
        data = bytearray(b"".join(bytes(v) for v in a.payload))
        offset = int(a.draw(2) * len(data))
        data[offset] ^= 0xFF
        a.engine.record(rule, a.msg, offset=offset)
        return [Emit(a.header, [memoryview(data)])]
    a.engine.record(rule, a.msg)
    return None


ACTIONS: dict[str, Callable[[Attempt], Outcome]] = {
    "drop": _lost,
    "blackhole": _blackhole,
    "delay": _delay,
    "bandwidth": _bandwidth,
    "duplicate": _duplicate,
    "reset": _reset,
    "status": _status,
    "rnr": _rnr,
    "corrupt": _corrupt,
}


def _fault_view(frame: Frame) -> tuple[str, int | None, int | None, int]:
    """What fault rules match on: operation, sequence number, rmr_context and size."""
    kind = frame.type
    name = _OPS.get(kind, "CM")
    seq = frame.fields[0] if name not in ("CM", "HEARTBEAT") else None
    rmr_context = frame.fields[2] if kind in _ADDRESSED else None
    size = frame.fields[3] if kind == FrameType.READ_REQ else frame.payload_len
    if kind == FrameType.ATOMIC:
        size = ATOMIC_BYTES
    return name, seq, rmr_context, size


def decide_send(
    engine: FaultEngine,
    node: str,
    link: PeerLink,
    header: bytes,
    payload: Sequence[memoryview],
    now: float,
) -> list[Decision]:
    """Apply the first rule that fires on each transmission of one message."""
    frame = decode_header(memoryview(header)[4:])
    name, seq, rmr_context, size = _fault_view(frame)
    for _ in range(1 + (RETRY_COUNT if frame.type in _RETRIED else 0)):
        link.messages += 1
        msg = Message(node, link.remote_node, link.id, link.messages, name, size, rmr_context, seq)
        rule = engine.decide(msg, now)
        if rule is None:
            return [Emit(header, payload)]
        if rule.action != "corrupt":
            engine.record(rule, msg)
        outcome = ACTIONS[rule.action](
            Attempt(engine, link, frame, header, payload, rule, msg, now)
        )
        if outcome is not None:
            return outcome
    if frame.type in REQUESTS and link.ep is not None:
        return [FailRequest(seq, St.DTO_ERR_TRANSPORT)]
    if frame.type == FrameType.HEARTBEAT:
        return []  # nothing retries a heartbeat: lost, the peer's heartbeat timeout decides
    return [Reset("a response was lost past the retry count")]


def decide_bind(
    engine: FaultEngine, node: str, link: PeerLink, length: int, key: int, now: float
) -> St | None:
    """A fault on an RMR bind as it executes: the status it fails with, or None."""
    msg = Message(
        node, link.remote_node, link.id, link.messages, "RMR_BIND", length, key or None, None
    )
    rule = engine.decide(msg, now)
    if rule is None or rule.action not in ("status", "drop", "corrupt"):
        return None
    engine.record(rule, msg)
    return St(rule.status) if rule.action == "status" else St.RMR_OPERATION_FAILED
