"""dat_set_consumer_context keeps a context per live handle: those of freed handles are dropped
as contexts accumulate (a program that creates and frees objects with contexts for hours does not
grow), those of live handles are kept, and a new handle starts with none."""

from __future__ import annotations

from client.core import CONTEXT_SWEEP
from proto.constants import HandleType
from tests.core.harness import Fabric


def test_contexts_of_freed_handles_are_dropped_and_live_ones_kept() -> None:
    fabric = Fabric()
    c = fabric.add_consumer(fabric.add_node("a"))
    core = c.core
    live = [c.call(core.pz_create()) for _ in range(CONTEXT_SWEEP)]
    for pz in live:
        core.set_context(HandleType.PZ, pz, f"live {pz}")
    for i in range(4 * CONTEXT_SWEEP):
        pz = c.call(core.pz_create())
        assert core.get_context(HandleType.PZ, pz) is None, "a new handle has no context"
        core.set_context(HandleType.PZ, pz, i)
        c.call(core.pz_free(pz))
    assert len(core.contexts) <= 2 * CONTEXT_SWEEP + 1
    assert [core.get_context(HandleType.PZ, pz) for pz in live] == [f"live {pz}" for pz in live]
