"""Building blocks of the in-memory tests: a consumer with a PZ, an EVD, an EP and memory, and
two of them connected."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from client.core import Call, Event, LmrInfo, Op
from proto.attrs import EpAttr
from proto.constants import DtoCompletionStatus, EvdFlags, EventNumber, MemPriv, MemType, PspFlags
from tests.core.harness import Fabric, Node, SimConsumer

Brief = tuple[object, ...]


def brief(event: Event) -> Brief:
    """An event as a short tuple: (number, cookie, status, length) for a DTO completion,
    (number, cookie, status) for a bind, (number, private_data) for a connection event,
    (number, conn_qual, private_data) for a connection request."""
    number = event.event_number
    if number == EventNumber.DTO_COMPLETION_EVENT:
        return number, event.cookie, DtoCompletionStatus(event.status), event.transfered_length
    if number == EventNumber.RMR_BIND_COMPLETION_EVENT:
        return number, event.cookie, DtoCompletionStatus(event.status)
    if number == EventNumber.CONNECTION_REQUEST_EVENT:
        return number, event.conn_qual, event.private_data
    return number, event.private_data


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

    def log(self) -> list[Brief]:
        """Every event queued, taken off the EVD, each as ``brief`` makes it."""
        return [brief(e) for e in self.events()]

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
    fabric: Fabric,
    node: Node,
    size: int = 4096,
    attr: EpAttr | None = None,
    qlen: int = 256,
    privileges: MemPriv = MemPriv.ALL,
) -> Side:
    """A consumer on ``node`` with everything a connection needs (its memory registered with
    ``privileges``)."""
    c = fabric.add_consumer(node)
    core = c.core
    pz = c.call(core.pz_create())
    evd = c.call(core.evd_create(qlen, EvdFlags.DEFAULT))
    ep = c.call(core.ep_create(pz, evd, evd, evd, attr))
    address = c.alloc(size)
    lmr = c.call(core.lmr_create(MemType.VIRTUAL, address, size, pz, privileges, c.locate))
    return Side(c, pz, evd, ep, address, size, lmr)


def address(node: Node) -> tuple[str, int]:
    """A node's IA address as dat_ep_connect takes it."""
    return ("10.0.0.1", node.port)


def connect(
    fabric: Fabric, a: Side, b: Side, conn_qual: int = 1, psp: bool = True
) -> tuple[Event, Event, Event]:
    """a connects to b (a PSP on b unless ``psp`` is False, accepted with b's EP); both see
    ESTABLISHED. Returns the request and the two ESTABLISHED events."""
    if psp:
        b.c.call(b.c.core.psp_create(conn_qual, b.evd, PspFlags.CONSUMER))
    a.c.call(a.c.core.ep_connect(a.ep, address(b.c.node), conn_qual, 10_000_000, b"hi"))
    fabric.run()
    (request,) = b.events()
    assert request.event_number == EventNumber.CONNECTION_REQUEST_EVENT
    b.c.call(b.c.core.cr_accept(request.cr, b.ep, b"ok"))
    fabric.run()
    (est_a,) = a.events()
    (est_b,) = b.events()
    assert est_a.event_number == EventNumber.CONNECTION_EVENT_ESTABLISHED
    assert est_b.event_number == EventNumber.CONNECTION_EVENT_ESTABLISHED
    return request, est_a, est_b


def pair(fabric: Fabric | None = None, size: int = 4096, **kw: object) -> tuple[Fabric, Side, Side]:
    """Two nodes, a consumer on each, connected."""
    fabric = fabric or Fabric()
    n1, n2 = fabric.add_node("n1", **kw), fabric.add_node("n2", **kw)
    a, b = side(fabric, n1, size), side(fabric, n2, size)
    connect(fabric, a, b)
    return fabric, a, b


def add_rule(c: SimConsumer, seed: int | None = None, **rule: Any) -> None:
    """Install one fault rule on the consumer's node through the admin call (name defaults to
    its action)."""
    rule.setdefault("name", rule["action"])
    c.admin("fault_add", [[rule], seed])


def fault_log(c: SimConsumer) -> list[dict[str, Any]]:
    """The fault log of the consumer's node, each line parsed."""
    (lines,) = c.admin("fault_log", [False])
    return [json.loads(line) for line in lines]


def raw(method: str, *args: object) -> Op:
    """One call with exactly these arguments (client.core adds nothing and checks nothing)."""
    result = yield Call(method, list(args))
    return result
