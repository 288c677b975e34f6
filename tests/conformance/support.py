"""What the conformance modules share: two real nodes per module, connected consumer pairs,
and small helpers (a paused daemon, the next completion, recognisable bytes)."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import pytest

from client.api import Ep, Evd, Ia, Lmr, Pz
from client.core import Event
from client.shm import Buffer
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.codec import encode
from proto.constants import EventNumber, MemPriv, MemType
from proto.errors import DatQueueEmpty
from proto.frames import FrameType
from tests.integration.flows import stop_process, wait_event

WAIT_US = 10_000_000
DEADLINE_S = 10.0
QUALS = itertools.count(31_000)
E = EventNumber


def _ends(nodes: tuple[Node, Node], path: str) -> tuple[Node, Node]:
    """The two daemons of a connection: TCP between two nodes, or the same-node local path."""
    a, b = nodes
    return (a, b) if path == "tcp" else (a, a)


@contextmanager
def paused(node: Node) -> Iterator[None]:
    """SIGSTOP a daemon for the block (it cannot answer anything meanwhile)."""
    stop_process(node.proc.pid)
    try:
        yield
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)


@dataclass
class Side:
    """One consumer: an IA, a PZ, separate request/recv/connect EVDs, an EP and an ALL LMR."""

    ia: Ia
    pz: Pz
    request_evd: Evd
    recv_evd: Evd
    connect_evd: Evd
    ep: Ep
    buf: Buffer
    lmr: Lmr

    @property
    def view(self) -> memoryview:
        return self.buf.view

    def sync(self) -> None:
        """A round trip to this IA's daemon: every frame sent before it has been handled."""
        self.ia.query()


def _side(stack: ExitStack, node: Node, attr: EpAttr | None = None, size: int = 4096) -> Side:
    ia = stack.enter_context(Ia(node.socket))
    pz = ia.pz_create()
    request_evd, recv_evd, connect_evd = (ia.evd_create(64) for _ in range(3))
    ep = ia.ep_create(pz, recv_evd, request_evd, connect_evd, attr)
    buf = ia.alloc(size)
    lmr = ia.lmr_create(MemType.VIRTUAL, buf, size, pz, MemPriv.ALL)
    return Side(ia, pz, request_evd, recv_evd, connect_evd, ep, buf, lmr)


def _connect(a: Side, b: Side, node_b: Node) -> None:
    qual = next(QUALS)
    psp = b.ia.psp_create(qual, b.connect_evd)
    a.ep.connect(node_b.address, qual, WAIT_US)
    request = wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT)
    b.ia.cr(request).accept(b.ep)
    wait_event(a.connect_evd, E.CONNECTION_EVENT_ESTABLISHED)
    wait_event(b.connect_evd, E.CONNECTION_EVENT_ESTABLISHED)
    psp.free()


@contextmanager
def connected(
    node_a: Node,
    node_b: Node,
    attr_a: EpAttr | None = None,
    attr_b: EpAttr | None = None,
    size: int = 4096,
) -> Iterator[tuple[Side, Side]]:
    """A connected EP pair (a is the active side); both IAs are closed afterwards."""
    with ExitStack() as stack:
        a = _side(stack, node_a, attr_a, size)
        b = _side(stack, node_b, attr_b, size)
        _connect(a, b, node_b)
        yield a, b


def completion(evd: Evd) -> Event:
    """The next event of ``evd``, which must be a DTO completion."""
    return wait_event(evd, E.DTO_COMPLETION_EVENT)


def nothing_queued(*evds: Evd) -> None:
    """No event is queued on any of ``evds``."""
    for evd in evds:
        with pytest.raises(DatQueueEmpty):
            evd.dequeue()


def pattern(n: int, seed: int = 1) -> bytes:
    """``n`` recognisable bytes."""
    return bytes((i * 7 + seed) % 251 + 1 for i in range(n))


def forge(
    side: Side, kind: FrameType, cookie: int, iov: list[list[int]], remote: list[int]
) -> None:
    """Post straight to the daemon, skipping the library's synchronous checks."""
    side.ia._send(encode(kind, side.ep.handle, cookie, 0, iov, remote))
