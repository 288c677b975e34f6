"""The admin surface is apart from the consumers' (docs/security.md): fault rules, revoke,
crash and status are served on admin connections only, and an admin connection is no IA."""

from __future__ import annotations

import pytest

from client.core import Call, Op
from proto.codec import encode
from proto.errors import DatModelNotSupported
from proto.frames import ROLE_ADMIN, FrameType
from tests.core.flows import pair, side
from tests.core.harness import Fabric, SimConsumer

ADMIN_CALLS = [
    ("fault_add", [[{"name": "r", "action": "drop"}], None]),
    ("fault_remove", ["r"]),
    ("fault_clear", []),
    ("fault_list", []),
    ("fault_log", [False]),
    ("rmr_revoke", [1]),
    ("node_crash", []),
    ("node_status", []),
]


@pytest.mark.parametrize(("method", "args"), ADMIN_CALLS, ids=[m for m, _ in ADMIN_CALLS])
def test_a_consumer_cannot_make_an_admin_call(method: str, args: list[object]) -> None:
    fabric, a, b = pair()
    with pytest.raises(DatModelNotSupported, match="admin socket only"):
        a.c.call(iter_call(method, args))
    fabric.run()
    assert not a.c.closed_for and b.log() == [], "nothing happened to the fabric"
    assert not a.c.node.nic.faults.rules


def iter_call(method: str, args: list[object]) -> Op:
    """An admin call sent as a consumer would send it (past the client's own check)."""
    return (yield Call(method, args))


def test_an_admin_connection_is_no_ia() -> None:
    fabric = Fabric()
    node = fabric.add_node("n")
    a = side(fabric, node)
    admin = SimConsumer(fabric, node, "ops", ROLE_ADMIN)
    assert node.nic.admin_calls and admin.state is not None and admin.state.admin
    (status,) = admin.call(admin.core.admin("node_status", []))
    assert status["consumers"] == 1, "the admin connection is not counted as an IA"
    with pytest.raises(DatModelNotSupported, match="unknown call 'pz_create'"):
        admin.call(admin.core.pz_create())
    admin.send(encode(FrameType.DOORBELL, a.ep))  # a doorbell is a consumer's word
    assert "not a consumer request" in admin.closed_for
    assert a.c.call(a.c.core.pz_create()) > 0, "the consumers carry on"
