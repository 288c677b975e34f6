"""Building blocks of the in-memory tests: a consumer with a PZ, an EVD, an EP and memory, and
two of them connected."""

from __future__ import annotations

from dataclasses import dataclass

from client.core import Event, LmrInfo
from proto.attrs import EpAttr
from proto.constants import EvdFlags, EventNumber, MemPriv, MemType, PspFlags
from tests.core.harness import Fabric, Node, SimConsumer


@dataclass
class Side:
    """One consumer: its PZ, its one EVD (for every event), its EP and registered memory."""

    c: SimConsumer
    pz: int
    evd: int
    ep: int
    address: int
    size: int
    lmr: LmrInfo

    def events(self) -> list[Event]:
        """Every event queued on the EVD."""
        return self.c.events(self.evd)

    def numbers(self) -> list[EventNumber]:
        """The event numbers queued, taken off the EVD."""
        return [e.event_number for e in self.events()]

    def triplet(self, offset: int = 0, length: int | None = None) -> list[int]:
        """An LMR triplet of this side's memory."""
        n = self.size - offset if length is None else length
        return [self.address + offset, n, self.lmr.lmr_context]

    def rmr(self, offset: int = 0, length: int | None = None) -> list[int]:
        """An RMR triplet of this side's memory (the LMR's rmr_context)."""
        n = self.size - offset if length is None else length
        return [self.address + offset, n, self.lmr.rmr_context]

    def memory(self, offset: int = 0, length: int | None = None) -> memoryview:
        """The bytes of this side's registered memory."""
        n = self.size - offset if length is None else length
        return self.c.view(self.address + offset, n)


def side(
    fabric: Fabric, node: Node, size: int = 4096, attr: EpAttr | None = None, qlen: int = 256
) -> Side:
    """A consumer on ``node`` with everything a connection needs."""
    c = fabric.add_consumer(node)
    core = c.core
    pz = c.call(core.pz_create())
    evd = core.evd_create(qlen, EvdFlags.DEFAULT)
    ep = c.call(core.ep_create(pz, evd, evd, evd, attr))
    address = c.alloc(size)
    lmr = c.call(core.lmr_create(MemType.VIRTUAL, address, size, pz, MemPriv.ALL, c.locate))
    return Side(c, pz, evd, ep, address, size, lmr)


def connect(fabric: Fabric, a: Side, b: Side, conn_qual: int = 1) -> None:
    """a connects to b (a PSP on b, accepted with b's EP); both see ESTABLISHED."""
    b.c.call(b.c.core.psp_create(conn_qual, b.evd, PspFlags.CONSUMER))
    address = ("10.0.0.1", b.c.node.port)
    a.c.call(a.c.core.ep_connect(a.ep, address, conn_qual, 10_000_000, b"hi"))
    fabric.run()
    (request,) = b.events()
    assert request.event_number == EventNumber.CONNECTION_REQUEST_EVENT
    b.c.call(b.c.core.cr_accept(request.cr, b.ep, b"ok"))
    fabric.run()
    assert a.numbers() == [EventNumber.CONNECTION_EVENT_ESTABLISHED]
    assert b.numbers() == [EventNumber.CONNECTION_EVENT_ESTABLISHED]


def pair(fabric: Fabric | None = None, size: int = 4096, **kw: object) -> tuple[Fabric, Side, Side]:
    """Two nodes, a consumer on each, connected."""
    fabric = fabric or Fabric()
    n1, n2 = fabric.add_node("n1", **kw), fabric.add_node("n2", **kw)
    a, b = side(fabric, n1, size), side(fabric, n2, size)
    connect(fabric, a, b)
    return fabric, a, b
