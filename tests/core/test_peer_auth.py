"""Peer authentication in memory (proto.peer_auth): daemons that share the cluster key prove it
to each other before the CM speaks; anything else is refused with its reason, reaches neither
the CM nor RDMA, and a stream that does not authenticate (or, accepted, asks for no connection)
is cut within the heartbeat timeout."""

from __future__ import annotations

from typing import Any

import pytest

from proto.constants import EpState, PspFlags
from proto.constants import EventNumber as E
from proto.frames import FrameType
from proto.peer_auth import ACCEPT, CONNECT, NONCE_BYTES, Transcript, proof
from tests.core.flows import Side, address, connect, pair, side
from tests.core.harness import CLUSTER_KEY, STRANGER, Fabric, Node, Stranger

REJECTED = (E.CONNECTION_EVENT_NON_PEER_REJECTED, b"")


def _nodes(k1: bytes | None, k2: bytes | None) -> tuple[Fabric, Side, Side]:
    fabric = Fabric()
    n1 = fabric.add_node("n1", cluster_key=k1)
    n2 = fabric.add_node("n2", cluster_key=k2)
    a, b = side(fabric, n1), side(fabric, n2)
    b.c.call(b.c.core.psp_create(1, b.evd, PspFlags.CONSUMER))
    return fabric, a, b


def _errors(fabric: Fabric) -> list[tuple[str, str]]:
    return [(src, fields[0]) for src, _, fields in fabric.frames(FrameType.ERROR)]


def _names(fabric: Fabric) -> list[str]:
    return [name for _, _, name, _, _ in fabric.trace]


def test_one_key_is_proved_both_ways_before_the_cm_speaks() -> None:
    fabric, a, b = pair()
    hello_1, challenge, hello_2, answer, last = fabric.trace[:5]
    assert [(src, name) for src, _, name, _, _ in fabric.trace[:6]] == [
        ("n1", "HELLO"),
        ("n1", "AUTH"),
        ("n2", "HELLO"),
        ("n2", "AUTH"),
        ("n1", "AUTH"),
        ("n1", "CONN_REQ"),
    ]
    t = Transcript(challenge[3][0], answer[3][0], hello_1[3][3], hello_2[3][3])
    assert len(t.connect_nonce) == len(t.accept_nonce) == NONCE_BYTES
    assert challenge[3][1] == b"" and last[3][0] == b""
    assert answer[3][1] == proof(CLUSTER_KEY, ACCEPT, t) != b""
    assert last[3][1] == proof(CLUSTER_KEY, CONNECT, t) != answer[3][1]
    assert a.c.core.eps[a.ep].state == b.c.core.eps[b.ep].state == EpState.CONNECTED


@pytest.mark.parametrize(
    ("k1", "k2", "refuser", "why"),
    [
        (
            b"one key of sixteen+",
            b"another key, 16+ bytes",
            "n1",
            "proof of the cluster key is wrong",
        ),
        (None, CLUSTER_KEY, "n2", "sent no proof of the cluster key"),
        (CLUSTER_KEY, None, "n1", "sent no proof of the cluster key"),
    ],
)
def test_a_peer_that_cannot_prove_the_key_is_refused_before_any_request(
    k1: bytes | None, k2: bytes | None, refuser: str, why: str
) -> None:
    """The side that holds the key checks the other's proof; the connect is NON_PEER_REJECTED,
    the listener never sees a request, and the refusal names the peer."""
    fabric, a, b = _nodes(k1, k2)
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), 1, 10_000_000, b"hi"))
    fabric.run()
    ((src, reason),) = _errors(fabric)
    assert src == refuser and why in reason and "refused" in reason
    other = "n2@10.0.0.1:7001" if refuser == "n1" else "n1@10.0.0.1:7000"
    assert repr(other) in reason
    if k1 is not None:  # a node with a key sends no request before the peer proved it
        assert "CONN_REQ" not in _names(fabric)
    assert a.log() == [REJECTED] and b.log() == []
    assert fabric.nodes[7000].nic.wire.links == {} and fabric.nodes[7001].nic.wire.links == {}


def test_nodes_without_keys_connect_with_empty_proofs() -> None:
    """--no-cluster-key on both sides: the exchange still runs, with nothing proved."""
    fabric, a, b = _nodes(None, None)
    connect(fabric, a, b, psp=False)
    assert [f[1] for _, _, f in fabric.frames(FrameType.AUTH)] == [b"", b"", b""]


def _stranger(fabric: Fabric, node: Node, hello: str = STRANGER) -> Stranger:
    s = fabric.dial(node)
    s.hello(hello)
    return s


def _heard(s: Stranger) -> list[str]:
    return [f.type.name for f in s.heard]


@pytest.mark.parametrize(
    "first",
    [
        (FrameType.CONN_REQ, 1, b"", 4, 4),
        (FrameType.HEARTBEAT,),
        (FrameType.DISCONNECT,),
    ],
)
def test_a_frame_before_authentication_is_refused(first: tuple[Any, ...]) -> None:
    fabric, _a, b = _nodes(CLUSTER_KEY, CLUSTER_KEY)
    s = _stranger(fabric, b.c.node)
    s.send(*first)
    fabric.run()
    assert _heard(s) == ["HELLO", "ERROR"]
    assert "has not authenticated" in s.heard[1].fields[0] and s.closed
    assert b.log() == [] and b.c.node.nic.wire.links == {}


def test_a_stranger_with_a_known_rmr_context_writes_nothing() -> None:
    """The one-sided path is not reachable before the key is proved: a WRITE naming a live
    rmr_context of an established pair lands nowhere, and the pair goes on."""
    fabric, a, b = pair()
    before = bytes(b.memory(0, 8))
    s = _stranger(fabric, b.c.node)
    addr, _, rmr_context = b.rmr(0, 8)
    s.send(FrameType.WRITE, 1, addr, rmr_context, payload=b"stranger")
    fabric.run()
    assert _heard(s) == ["HELLO", "ERROR"] and s.closed
    assert bytes(b.memory(0, 8)) == before
    assert a.log() == [] and b.log() == []
    assert b.c.core.eps[b.ep].state == EpState.CONNECTED


def test_a_replayed_proof_is_refused() -> None:
    """A stranger that recorded a genuine exchange replays the connecting side's HELLO,
    challenge and proof: the accepting side's fresh challenge makes the old proof wrong."""
    fabric, _a, b = pair()
    hello_1, challenge, _, _, last = fabric.trace[:5]
    s = _stranger(fabric, b.c.node, hello_1[3][3])
    s.send(FrameType.AUTH, challenge[3][0], b"")
    fabric.run()
    assert _heard(s) == ["HELLO", "AUTH"]
    s.send(FrameType.AUTH, b"", last[3][1])
    fabric.run()
    assert _heard(s) == ["HELLO", "AUTH", "ERROR"]
    assert "proof of the cluster key is wrong" in s.heard[2].fields[0]


def test_a_proof_for_another_name_is_refused() -> None:
    """The proof covers both HELLO names: a key holder's proof made for one name does not
    carry another (the transcript differs)."""
    fabric, _a, b = _nodes(CLUSTER_KEY, CLUSTER_KEY)
    s = _stranger(fabric, b.c.node)
    nonce = bytes(range(NONCE_BYTES))
    s.send(FrameType.AUTH, nonce, b"")
    fabric.run()
    hello_2, answer = s.heard
    t = Transcript(nonce, answer.fields[0], "someone-else@10.0.0.9:1", hello_2.fields[3])
    s.send(FrameType.AUTH, b"", proof(CLUSTER_KEY, CONNECT, t))
    fabric.run()
    assert "proof of the cluster key is wrong" in s.heard[2].fields[0]


@pytest.mark.parametrize(
    ("nonce", "why"),
    [(b"short", "challenge is 16 bytes"), ("text", "both bytes"), (7, "both bytes")],
)
def test_a_malformed_challenge_closes_the_stream(nonce: object, why: str) -> None:
    fabric, _a, b = _nodes(CLUSTER_KEY, CLUSTER_KEY)
    s = _stranger(fabric, b.c.node)
    s.send(FrameType.AUTH, nonce, b"")
    fabric.run()
    assert _heard(s) == ["HELLO", "ERROR"] and why in s.heard[1].fields[0]
    assert b.c.node.nic.wire.links == {}


@pytest.mark.parametrize(
    ("authenticates", "why"),
    [
        (False, "not authenticated within the heartbeat timeout"),
        (True, "no connection request within the heartbeat timeout"),
    ],
)
def test_a_stream_that_asks_for_nothing_is_cut_within_the_heartbeat_timeout(
    authenticates: bool, why: str
) -> None:
    """Half-open or idle: a stream that has not authenticated, or authenticated and sent no
    CONN_REQ, is cut at the first heartbeat tick past the timeout from its start (here 3 s,
    ticks each second: at 4.0), not before; established pairs beside it are untouched."""
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    start = fabric.now()
    s = _stranger(fabric, b.c.node)
    if authenticates:
        s.authenticate()
        assert _heard(s) == ["HELLO", "AUTH"] and not s.closed
    fabric.advance(4.0 - start - 1e-6)
    assert not s.closed and len(b.c.node.nic.wire.links) == 2
    fabric.advance(1e-6)
    assert s.closed == why
    assert len(b.c.node.nic.wire.links) == 1
    assert b.c.core.eps[b.ep].state == EpState.CONNECTED and a.log() == b.log() == []
