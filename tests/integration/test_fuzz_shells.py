"""The fuzz suites' generator (tests/core/test_fuzz.py) against real daemons: their shells (the
uvloop streams, framing, the admin and peer sockets) take hostile frames over real sockets while
an established pair beside them keeps writing and checking its bytes. Both daemons live on, log
no traceback and nothing at ERROR, and the pair's bytes are right.

``DATFABRIC_SHELL_FUZZ_INPUTS`` connections per plane (5,000 by default), each a HELLO or not
(or, on the peer plane, the cluster key's exchange passed as an insider) and then ``BATCH``
random frames: most end at their first bad frame, when the daemon closes the connection.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import socket

import pytest

from fabricd import keyfile
from fabricd.launch import Node, user_key
from proto.codec import Frame, FrameReader, encode, pack
from proto.constants import EventNumber
from proto.frames import MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, FrameType
from proto.peer_auth import CONNECT, NONCE_BYTES
from tests.core.test_fuzz import CALLS, PEER_TYPES, SEED, frame, value
from tests.integration.flows import Pair, connect_pair, wait_event

INPUTS = int(os.environ.get("DATFABRIC_SHELL_FUZZ_INPUTS", "5000"))
BATCH = 4
STRANGER = "stranger@10.9.9.9:9"


def _exchange(s: socket.socket, data: bytes, want: int = 0) -> list[Frame]:
    """Send ``data``; then read ``want`` frames (0: until the daemon closes)."""
    s.sendall(data)
    if not want:
        s.shutdown(socket.SHUT_WR)
    reader, frames = FrameReader(), list[Frame]()
    while not want or len(frames) < want:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        reader.feed(chunk)
        while (f := reader.next_event()) is not None:
            frames.append(f)
    return frames


def _authenticate(s: socket.socket) -> bool:
    """Pass the cluster key's exchange as a daemon of this fabric would (an insider)."""
    nonce = bytes(NONCE_BYTES)
    hello = encode(FrameType.HELLO, MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION, "peer", STRANGER)
    got = _exchange(s, hello + encode(FrameType.AUTH, nonce, b""), want=2)
    if len(got) < 2 or got[1].type != FrameType.AUTH:
        return False
    key = keyfile.load(user_key())
    msg = pack([CONNECT, nonce, got[1].fields[0], STRANGER, got[0].fields[3]])
    s.sendall(encode(FrameType.AUTH, b"", hmac.new(key, msg, hashlib.sha256).digest()))
    return True


def _consumer_batch(rng: random.Random, n: int) -> bytes:
    out = (
        [encode(FrameType.HELLO, PROTOCOL_VERSION, PROTOCOL_VERSION, "consumer", f"fuzz-{n}")]
        if rng.random() < 0.8
        else []
    )
    for _ in range(BATCH):
        if rng.random() < 0.6:
            method = rng.choice(CALLS)
            args = [value(rng) for _ in range(rng.randrange(7))]
            out.append(encode(FrameType.CALL, rng.randrange(1, 2**31), method, args))
        else:
            out.append(frame(rng, list(FrameType)))
    return b"".join(out)


def _check(p: Pair, round_: int) -> None:
    data = bytes((round_ + i) % 251 for i in range(64))
    p.view_a[:64] = data
    p.ep_a.post_rdma_write([p.lmr_a.triplet(0, 64)], round_, p.lmr_b.remote(0, 64))
    done = wait_event(p.evd_a, EventNumber.DTO_COMPLETION_EVENT)
    assert (done.cookie, done.status) == (round_, 0)
    assert bytes(p.view_b[:64]) == data


@pytest.mark.timeout(600)
@pytest.mark.parametrize("plane", ["consumer", "admin", "peer"])
def test_real_shells_take_hostile_frames_and_the_pair_runs_on(
    two_nodes: tuple[Node, Node], plane: str
) -> None:
    a, b = two_nodes
    p = connect_pair(a.socket, b.socket, b.address)
    rng = random.Random(SEED + len(plane))
    sent = closed = insiders = 0
    try:
        while sent < INPUTS:
            if plane == "peer":
                s = socket.create_connection(b.address, timeout=10)
                insider = rng.random() < 0.7 and _authenticate(s)
                insiders += insider
                data = b"".join(frame(rng, PEER_TYPES) for _ in range(BATCH))
                if not insider and rng.random() < 0.5:  # a stranger, before or after HELLO
                    data = (
                        encode(
                            FrameType.HELLO, PROTOCOL_VERSION, PROTOCOL_VERSION, "peer", STRANGER
                        )
                        + data
                    )
            else:
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(10)
                s.connect(b.socket if plane == "consumer" else b.socket + ".admin")
                data = _consumer_batch(rng, sent)
                if plane == "admin":  # the operator's socket: every frame but crash
                    data = data.replace(b"node_crash", b"node_crasx")
            with s:
                got = _exchange(s, data)
            closed += any(f.type == FrameType.ERROR for f in got)
            sent += 1
            if sent % 250 == 0:
                _check(p, sent // 250)
        _check(p, 10**6)
    finally:
        p.close()
    for node in (a, b):
        assert node.proc.poll() is None, f"{node.name} died"
        bad = [line for line in node.log_text().splitlines()
               if "Traceback" in line or f"fabricd[{node.name}] ERROR" in line]  # fmt: skip
        assert bad == [], bad[:20]
    assert closed > 0, "no connection was closed for its input: the test sent nothing hostile"
    assert plane != "peer" or insiders > 0, "no stranger passed the key's exchange"
