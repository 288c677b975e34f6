"""Whose segment is whose (the core's side of the segment desk, fabricd/desk.py): an IA may
register only memory it handed to its node, may fetch only its own queues and the shared regions
it attached, and no two open IAs share a name (the name is how a driver asks for them)."""

from __future__ import annotations

import pytest

from proto.constants import DatReturnSubtype as Sub
from proto.constants import EvdFlags, MemPriv, MemType
from proto.errors import DatInvalidParameter
from proto.eventq import eq_segment
from tests.core.harness import Fabric, SimConsumer


def test_an_ia_registers_only_memory_it_handed_over() -> None:
    fabric = Fabric()
    node = fabric.add_node("n")
    mine, theirs = fabric.add_consumer(node), fabric.add_consumer(node)
    pz = mine.call(mine.core.pz_create())
    foreign = theirs.alloc(4096)
    with pytest.raises(DatInvalidParameter, match="no segment this IA handed") as err:
        mine.call(mine.core.lmr_create(MemType.VIRTUAL, foreign, 4096, pz, MemPriv.ALL,
                                       theirs.locate))  # fmt: skip
    assert err.value.subtype == Sub.INVALID_ARG3
    own = mine.alloc(4096)
    mine.call(mine.core.lmr_create(MemType.VIRTUAL, own, 4096, pz, MemPriv.ALL, mine.locate))


def test_the_desk_hands_an_ia_its_own_queues_and_attached_regions_only() -> None:
    fabric = Fabric()
    node = fabric.add_node("n")
    mine, theirs = fabric.add_consumer(node), fabric.add_consumer(node)
    assert mine.state is not None and theirs.state is not None
    evd = mine.call(mine.core.evd_create(4, EvdFlags.DEFAULT))
    nic = node.nic
    assert nic.regs.may_fetch(mine.state, eq_segment(mine.name, evd))
    assert not nic.regs.may_fetch(theirs.state, eq_segment(mine.name, evd))
    assert not nic.regs.may_fetch(mine.state, "datfabric-nothing") and not nic.regs.may_fetch(
        mine.state, 7
    )
    (segment, _) = mine.call(mine.core.shared_attach(b"c" * 40, 4096))
    assert nic.regs.may_fetch(mine.state, segment)
    assert not nic.regs.may_fetch(theirs.state, segment), "not before it attached the region"
    assert nic.desk_consumer(mine.name, mine.pid) is mine.state
    with pytest.raises(PermissionError):
        nic.desk_consumer(mine.name, theirs.pid)


def test_no_two_open_ias_share_a_name() -> None:
    fabric = Fabric()
    node = fabric.add_node("n")
    first = fabric.add_consumer(node, "same")
    second = SimConsumer(fabric, node, "same", open_ia=False)
    assert "named 'same' already" in second.closed_for and not second.core.ready
    first.close()
    fabric.run()
    assert SimConsumer(fabric, node, "same").core.ready
