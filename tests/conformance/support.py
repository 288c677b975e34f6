"""What the conformance modules share: two real nodes per module, connected consumer pairs,
and small helpers (a paused daemon, the next completion, recognisable bytes, exact DAT_RETURN
codes)."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TypeVar

import pytest

from client.api import Ep, Evd, Ia, Lmr, Pz
from client.core import Event
from client.shm import Buffer
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.codec import encode
from proto.constants import (
    DAT_SUBTYPE_MASK,
    DAT_TYPE_MASK,
    DatReturnSubtype,
    DatReturnType,
    Dtos,
    EpState,
    EventNumber,
    MemPriv,
    MemType,
    dat_error,
)
from proto.errors import DatError, DatQueueEmpty
from proto.frames import FrameType
from proto.hostif import DTOS_OPCODE, write_wqe
from tests.integration.flows import stop_process, wait_event

WAIT_US = 10_000_000
DEADLINE_S = 10.0
QUALS = itertools.count(31_000)
E = EventNumber
Sub = DatReturnSubtype
DatErrorT = TypeVar("DatErrorT", bound=DatError)

# The subtype a DAT_INVALID_STATE for an endpoint carries: the state the EP is in (dat_error.h
# 47-55). Written out here, not taken from the implementation's own table.
EP_STATE_SUBTYPE: dict[EpState, DatReturnSubtype] = {
    EpState.UNCONNECTED: Sub.INVALID_STATE_EP_UNCONNECTED,
    EpState.ACTIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_ACTCONNPENDING,
    EpState.PASSIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_PASSCONNPENDING,
    EpState.TENTATIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_TENTCONNPENDING,
    EpState.CONNECTED: Sub.INVALID_STATE_EP_CONNECTED,
    EpState.DISCONNECTED: Sub.INVALID_STATE_EP_DISCONNECTED,
    EpState.RESERVED: Sub.INVALID_STATE_EP_RESERVED,
    EpState.COMPLETION_PENDING: Sub.INVALID_STATE_EP_COMPLPENDING,
    EpState.DISCONNECT_PENDING: Sub.INVALID_STATE_EP_DISCPENDING,
}


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
        with refused(DatQueueEmpty, Sub.NO_SUBTYPE):
            evd.dequeue()


def pattern(n: int, seed: int = 1) -> bytes:
    """``n`` recognisable bytes."""
    return bytes((i * 7 + seed) % 251 + 1 for i in range(n))


def forge_wqe(
    ia: Ia, ep: int, kind: Dtos, cookie: int, iov: list[list[int]], remote: Sequence[int] = ()
) -> None:
    """Post straight into an EP's queue and ring its doorbell, skipping the library's
    synchronous checks (as a consumer past them, or a C program, could)."""
    mirror = ia.core.ep_mirror(ep)
    sq, rq = ia.core.queues(mirror)
    ring = rq if kind == Dtos.RECEIVE else sq
    target = (remote[0], remote[1], remote[2]) if remote else (0, 0, 0)
    write_wqe(ring, DTOS_OPCODE[kind], 0, cookie, [(a, n, c) for a, n, c in iov], target)
    ring.publish()
    mirror.rung += 1
    ia._send(encode(FrameType.DOORBELL, ep))


def forge(side: Side, kind: Dtos, cookie: int, iov: list[list[int]], remote: list[int]) -> None:
    """A request DTO of ``side`` that skips the library's synchronous checks."""
    forge_wqe(side.ia, side.ep.handle, kind, cookie, iov, remote)


# -- exact DAT_RETURN codes ------------------------------------------------------------------------


def dat_code(error: type[DatError], subtype: DatReturnSubtype) -> int:
    """The full DAT_RETURN of ``error``'s type with ``subtype``: class | type | subtype."""
    return dat_error(error.TYPE, subtype)


def code_name(code: int) -> str:
    """A DAT_RETURN as hex and names (for assertion messages), e.g.
    ``0x80060027 DAT_INVALID_PARAMETER|DAT_INVALID_ARG3``."""
    code &= 0xFFFFFFFF
    try:
        kind = f"DAT_{DatReturnType(code & DAT_TYPE_MASK).name}"
    except ValueError:
        kind = f"type {code & DAT_TYPE_MASK:#x}"
    try:
        sub = f"DAT_{DatReturnSubtype(code & DAT_SUBTYPE_MASK).name}"
    except ValueError:
        sub = f"subtype {code & DAT_SUBTYPE_MASK}"
    return f"{code:#010x} {kind}|{sub}"


def assert_code(ret: int, error: type[DatError], subtype: DatReturnSubtype) -> None:
    """A flat ``dat_*`` call returned exactly ``error``'s type with ``subtype``.

    A wrong type fails through ``pytest.fail``, a wrong class or subtype through an
    AssertionError: a test marked ``xfail(raises=AssertionError)`` for a wrong subtype still
    fails when the call is not refused with the right type at all."""
    expected = dat_code(error, subtype)
    message = f"got {code_name(ret)}, expected {code_name(expected)}"
    if ret & DAT_TYPE_MASK != error.TYPE:
        pytest.fail(message)
    assert ret & 0xFFFFFFFF == expected, message


@contextmanager
def refused(
    error: type[DatErrorT], subtype: DatReturnSubtype
) -> Iterator[pytest.ExceptionInfo[DatErrorT]]:
    """The block raises ``error`` whose full code is its type with exactly ``subtype``
    (``pytest.raises`` alone would accept any subtype). As with assert_code, only a wrong
    subtype is an AssertionError: no exception, or another one, fails the test otherwise."""
    with pytest.raises(error) as info:
        yield info
    expected = dat_code(error, subtype)
    got = info.value.code
    assert got == expected, f"got {code_name(got)}, expected {code_name(expected)}: {info.value}"
