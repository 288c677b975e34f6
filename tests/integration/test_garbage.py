"""Bad input closes exactly one connection, with a logged reason; the daemon serves the rest."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest

from client.api import Ia
from fabricd.launch import Node
from proto.codec import FrameReader, encode
from proto.constants import EventNumber
from proto.frames import FrameType
from tests.integration.flows import connect_pair, wait_event

GARBAGE = {
    "random bytes": (random.Random(7).randbytes(4096), "protocol error"),
    "oversized length": (struct.pack(">I", 0xFFFFFFF0) + b"x" * 64, "outside 1.."),
    "wrong version": (encode(FrameType.HELLO, 99, 99, "consumer", "x"), "versions 99..99"),
    "truncated frame": (encode(FrameType.HELLO, 1, 1, "consumer", "x")[:7], "truncated frame"),
}


def _open(node: Node, plane: str) -> socket.socket:
    if plane == "consumer":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(node.socket)
    else:
        s = socket.create_connection(node.address)
    s.settimeout(10)
    return s


def _closed_by_daemon(s: socket.socket) -> list[FrameType]:
    """Read until the daemon closes; return the frame types it sent first."""
    reader = FrameReader()
    while chunk := s.recv(65536):
        reader.feed(chunk)
    types = []
    while (frame := reader.next_event()) is not None:
        types.append(frame.type)
    return types


@pytest.mark.parametrize("plane", ["consumer", "peer"])
@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_closes_one_connection(two_nodes: tuple[Node, Node], plane: str, kind: str) -> None:
    a, b = two_nodes
    pair = connect_pair(a.socket, b.socket, b.address)
    try:
        victim = b
        data, reason = GARBAGE[kind]
        if plane == "peer" and kind == "wrong version":
            data = encode(FrameType.HELLO, 99, 99, "peer", "x")
        s = _open(victim, plane)
        s.sendall(data)
        if kind == "truncated frame":
            s.shutdown(socket.SHUT_WR)
        sent_back = _closed_by_daemon(s)
        s.close()
        if kind != "truncated frame":
            assert FrameType.ERROR in sent_back, "the daemon says why before it closes"
        deadline = time.monotonic() + 5
        while reason not in victim.log_text():
            assert time.monotonic() < deadline, f"no logged reason {reason!r}:\n{victim.log_text()}"
            time.sleep(0.02)
        # the connection that was already there still works, in both directions
        pair.view_a[:5] = b"still"
        pair.ep_a.post_rdma_write([pair.lmr_a.triplet(0, 5)], 9, pair.lmr_b.remote(0, 5))
        done = wait_event(pair.evd_a, EventNumber.DTO_COMPLETION_EVENT)
        assert (done.cookie, done.status) == (9, 0)
        assert bytes(pair.view_b[:5]) == b"still"
        # and new consumers are served
        with Ia(victim.socket) as fresh:
            assert fresh.query()["adapter_name"] == victim.name
        assert victim.proc.poll() is None
    finally:
        pair.close()
