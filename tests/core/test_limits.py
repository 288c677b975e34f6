"""The daemon's limits in memory (proto.limits): past a per-IA limit a create call answers
DAT_INSUFFICIENT_RESOURCES with its DAT_RESOURCE_* subtype and changes nothing, and a free makes
room again; dat_ia_query advertises them; a daemon refuses the IA or peer stream one past its
own limits, and a HELLO name past its size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from client.core import Op
from proto.constants import DatReturnSubtype as Sub
from proto.constants import Dtos, EvdFlags, MemPriv, MemType, PspFlags
from proto.constants import EventNumber as E
from proto.errors import DatInsufficientResources, DatInvalidParameter
from proto.frames import MAX_HELLO_NAME, PROTOCOL_VERSION, FrameType
from proto.limits import Limits, parse
from tests.core.flows import pair, side
from tests.core.harness import Fabric, SimConsumer

Make = Callable[[SimConsumer, dict[str, Any]], Op]
Free = Callable[[SimConsumer, dict[str, Any], Any], Op]


def _pz(c: SimConsumer) -> int:
    pz: int = c.call(c.core.pz_create())
    return pz


def _lmr(c: SimConsumer, env: dict[str, Any]) -> Op:
    address = c.alloc(4096)
    return c.core.lmr_create(MemType.VIRTUAL, address, 4096, env["pz"], MemPriv.ALL, c.locate)


def _psp(c: SimConsumer, env: dict[str, Any]) -> Op:
    env["q"] = env.get("q", 100) + 1  # a conn_qual of its own each
    return c.core.psp_create(env["q"], env["evd"], PspFlags.CONSUMER)


# kind: (the limit, its subtype, make one, free one)
KINDS: dict[str, tuple[str, Sub, Make, Free]] = {
    "pz": ("ia_pzs", Sub.RESOURCE_PROTECTION_DOMAIN,
           lambda c, env: c.core.pz_create(), lambda c, env, h: c.core.pz_free(h)),
    "evd": ("ia_evds", Sub.RESOURCE_TEVD,
            lambda c, env: c.core.evd_create(4, EvdFlags.DEFAULT),
            lambda c, env, h: c.core.evd_free(h)),
    "ep": ("ia_eps", Sub.RESOURCE_TEP,
           lambda c, env: c.core.ep_create(env["pz"], env["evd"], env["evd"], env["evd"], None),
           lambda c, env, h: c.core.ep_free(h)),
    "lmr": ("ia_lmrs", Sub.RESOURCE_MEMORY_REGION, _lmr,
            lambda c, env, h: c.core.lmr_free(h.handle)),
    "rmr": ("ia_rmrs", Sub.RESOURCE_MEMORY_REGION,
            lambda c, env: c.core.rmr_create(env["pz"]), lambda c, env, h: c.core.rmr_free(h)),
    "psp": ("ia_listeners", Sub.RESOURCE_MEMORY, lambda c, env: _psp(c, env),
            lambda c, env, h: c.core.psp_free(h)),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_one_past_the_limit_is_insufficient_resources_and_a_free_makes_room(kind: str) -> None:
    limit, subtype, make, free = KINDS[kind]
    fabric = Fabric()
    node = fabric.add_node("n", limits=parse([f"{limit}=3"]))
    c = fabric.add_consumer(node)
    env: dict[str, Any] = {"pz": _pz(c) if kind != "pz" else 0}
    env["evd"] = c.call(c.core.evd_create(8, EvdFlags.DEFAULT)) if kind != "evd" else 0
    held = {"evd": 1}.get(kind, 0)  # what the IA holds already: its async EVD
    made = [c.call(make(c, env)) for _ in range(3 - held)]
    state = c.state
    assert state is not None
    before = {k: len(getattr(state, k)) for k in ("pzs", "evds", "eps", "lmrs", "rmrs", "psps")}
    with pytest.raises(DatInsufficientResources, match=f"--limit {limit}") as err:
        c.call(make(c, env))
    assert err.value.subtype == subtype
    assert before == {k: len(getattr(state, k)) for k in before}, "a refused create changed things"
    c.call(free(c, env, made[-1]))
    c.call(make(c, env))


def test_ia_query_advertises_the_limits() -> None:
    limits = Limits(ia_pzs=5, ia_evds=6, ia_eps=7, ia_lmrs=8, ia_rmrs=9, ia_bytes=1 << 20)
    fabric = Fabric()
    c = fabric.add_consumer(fabric.add_node("n", limits=limits))
    attrs = c.call(c.core.ia_query())
    assert {k: attrs[k] for k in ("max_pzs", "max_evds", "max_eps", "max_lmrs", "max_rmrs")} == {
        "max_pzs": 5,
        "max_evds": 6,
        "max_eps": 7,
        "max_lmrs": 8,
        "max_rmrs": 9,
    }
    assert attrs["max_lmr_block_size"] == 1 << 20


def test_registered_bytes_are_counted_per_ia_and_freed() -> None:
    """VIRTUAL LMRs count their length; an LMR over an LMR adds nothing; a free gives back."""
    fabric = Fabric()
    node = fabric.add_node("n", limits=Limits(ia_bytes=10_000))
    c = fabric.add_consumer(node)
    pz = _pz(c)

    def virtual(length: int) -> Any:
        address = c.alloc(length)
        return c.call(c.core.lmr_create(MemType.VIRTUAL, address, length, pz, MemPriv.ALL,
                                        c.locate))  # fmt: skip

    first = virtual(6000)
    c.call(c.core.lmr_create(MemType.LMR, first.handle, 6000, pz, MemPriv.ALL, c.locate))
    virtual(4000)
    with pytest.raises(DatInsufficientResources, match="ia_bytes") as err:
        virtual(1)
    assert err.value.subtype == Sub.RESOURCE_MEMORY
    other = fabric.add_consumer(node)  # per IA: another consumer has its own
    address = other.alloc(9000)
    other.call(other.core.lmr_create(MemType.VIRTUAL, address, 9000, _pz(other), MemPriv.ALL,
                                     other.locate))  # fmt: skip
    state = c.state
    assert state is not None and state.registered == 10_000
    c.call(c.core.lmr_free(first.handle + 1))  # the alias: nothing given back
    assert state.registered == 10_000
    c.call(c.core.lmr_free(first.handle))
    assert state.registered == 4000
    virtual(6000)


def test_the_ia_one_past_the_daemons_limit_is_refused_and_one_closing_makes_room() -> None:
    fabric = Fabric()
    node = fabric.add_node("n", limits=Limits(consumers=2))
    first, _ = fabric.add_consumer(node), fabric.add_consumer(node)
    third = SimConsumer(fabric, node, "third", open_ia=False)
    assert (
        "DAT_INSUFFICIENT_RESOURCES" in third.closed_for and "--limit consumers" in third.closed_for
    )
    assert not third.core.ready
    err = third.core.open_failure("n")
    assert isinstance(err, DatInsufficientResources) and err.subtype == Sub.RESOURCE_DEVICE
    admin = SimConsumer(fabric, node, "admin", role="admin")  # the operator is never locked out
    assert admin.core.ready
    first.close()
    fabric.run()
    assert fabric.add_consumer(node).core.ready


def test_the_peer_stream_one_past_the_daemons_limit_is_dropped() -> None:
    fabric, a, b = pair(limits=Limits(peer_links=1))
    stranger = fabric.dial(b.c.node)
    fabric.run()
    assert stranger.closed == "the node holds its limit of peer streams"
    assert len(b.c.node.nic.wire.links) == 1
    a.c.post(*_write(a, b))
    fabric.run()
    assert a.log()[0][2] == 0, "the pair goes on"


def _write(a: Any, b: Any) -> tuple[Any, ...]:
    return Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0


@pytest.mark.parametrize("plane", ["consumer", "peer"])
def test_a_hello_name_past_its_size_is_refused(plane: str) -> None:
    fabric = Fabric()
    node = fabric.add_node("n")
    name = "x" * (MAX_HELLO_NAME + 1)
    if plane == "consumer":
        c = SimConsumer(fabric, node, name, open_ia=False)
        assert f"1..{MAX_HELLO_NAME} characters" in c.closed_for and not node.nic.consumers
        side(fabric, node)  # the node serves on
        return
    s = fabric.dial(node)
    s.send(FrameType.HELLO, PROTOCOL_VERSION, PROTOCOL_VERSION, "peer", name)
    fabric.run()
    assert f"1..{MAX_HELLO_NAME} characters" in s.heard[-1].fields[0] and s.closed


@pytest.mark.parametrize(
    ("setting", "why"),
    [("ia_eps", "NAME=N"), ("no_such=3", "NAME=N"), ("ia_eps=x", "not a number"),
     ("ia_eps=0", "a limit is 1.."), ("private_data=257", "1..256")],
)  # fmt: skip
def test_a_bad_limit_setting_says_what_is_wrong(setting: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse([setting])
    assert parse(["ia_eps=0x10", "consumers=5"]) == Limits(ia_eps=16, consumers=5)


def test_a_provider_psp_whose_ia_is_full_rejects_the_request() -> None:
    """A PSP that makes an EP per request (PROVIDER) refuses one past ia_eps, as a full
    backlog does: the requester is rejected, the listener's IA holds no more EPs."""
    fabric = Fabric()
    n1, n2 = fabric.add_node("n1"), fabric.add_node("n2", limits=Limits(ia_eps=1))
    a, b = side(fabric, n1), side(fabric, n2)  # b's IA holds its one EP
    b.c.call(b.c.core.psp_create(9, b.evd, PspFlags.PROVIDER))
    a.c.call(a.c.core.ep_connect(a.ep, ("10.0.0.1", n2.port), 9, 10_000_000, b""))
    fabric.run()
    assert [n for n, *_ in a.log()] == [E.CONNECTION_EVENT_NON_PEER_REJECTED]
    assert b.log() == []
    state = b.c.state
    assert state is not None and len(state.eps) == 1


def test_hello_name_and_private_data_sizes_may_be_lowered() -> None:
    """--limit hello_name=20 private_data=8: a longer HELLO name is refused; a connect carrying
    9 bytes of private data is DAT_INVALID_PARAMETER (arg 6), and max_private_data_size says 8."""
    fabric = Fabric()
    n1 = fabric.add_node("n1", limits=parse(["hello_name=20", "private_data=8"]))
    n2 = fabric.add_node("n2")
    assert "1..20 characters" in SimConsumer(fabric, n1, "x" * 21, open_ia=False).closed_for
    a, b = side(fabric, n1), side(fabric, n2)
    assert a.c.call(a.c.core.ia_query())["max_private_data_size"] == 8
    with pytest.raises(DatInvalidParameter, match="exceeds 8 bytes") as err:
        a.c.call(a.c.core.ep_connect(a.ep, ("10.0.0.1", n2.port), 1, 10_000_000, b"x" * 9))
    assert err.value.subtype == Sub.INVALID_ARG6
    b.c.call(b.c.core.psp_create(1, b.evd, PspFlags.CONSUMER))
    a.c.call(a.c.core.ep_connect(a.ep, ("10.0.0.1", n2.port), 1, 10_000_000, b"x" * 8))
    fabric.run()
    assert [e.event_number for e in b.events()] == [E.CONNECTION_REQUEST_EVENT]
