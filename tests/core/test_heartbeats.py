"""Heartbeats on the manual clock: a quiet link says HEARTBEAT, a silently partitioned link is
cut after the heartbeat timeout (never before it, always by one tick after it), a link that
keeps hearing is never cut.

With Nic(heartbeat=(interval, timeout)) a node ticks every ``interval``; a tick notes whether
the link heard anything since the last one (then ``last_heard`` is that tick's time), and cuts
a link whose ``now - last_heard`` exceeds ``timeout``. A frame heard at time h is thus noted at
the first tick after h, and the link is cut at the first tick t with t - noted > timeout: for a
timeout that is a multiple of the interval, timeout + interval < t - h <= timeout + 2 * interval.
"""

from __future__ import annotations

import math

import pytest

from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, EpState, PspFlags
from proto.constants import EventNumber as E
from proto.frames import FrameType
from tests.core.flows import Side, add_rule, address, connect, pair, side
from tests.core.harness import Fabric

DTO = E.DTO_COMPLETION_EVENT
BROKEN = (E.CONNECTION_EVENT_BROKEN, b"")


def _heartbeats(fabric: Fabric) -> list[tuple[str, str]]:
    return [(src, dst) for src, dst, _ in fabric.frames(FrameType.HEARTBEAT)]


def test_a_quiet_link_says_heartbeat_each_interval_both_ways() -> None:
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    fabric.advance(1.0)  # the handshake was heard and sent since: no heartbeat yet
    assert _heartbeats(fabric) == []
    fabric.advance(1.0)
    assert _heartbeats(fabric) == [("n1", "n2"), ("n2", "n1")]
    fabric.advance(8.0)
    assert _heartbeats(fabric) == [("n1", "n2"), ("n2", "n1")] * 9
    assert [name for _, _, name, _, _ in fabric.trace[-18:]] == ["HEARTBEAT"] * 18
    assert a.log() == [] and b.log() == []


def test_traffic_replaces_heartbeats() -> None:
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    for _ in range(5):  # a write each interval: n1 sends WRITEs, n2 ACKs; neither is quiet
        fabric.advance(0.5)
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0)
        fabric.run()
        fabric.advance(0.5)
    assert _heartbeats(fabric) == []
    assert a.log() == [(DTO, 1, St.DTO_SUCCESS, 8)] * 5


def _partition_at(fabric: Fabric, a: Side, b: Side, when: float) -> float:
    """Last traffic (a write and its ACK) at ``when``, then a silent partition; returns when
    the last frame was heard."""
    fabric.advance(when - fabric.now())
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_SUCCESS, 8)]
    fabric.partition(a.c.node, b.c.node)
    return fabric.now()


@pytest.mark.parametrize("heard_at", [0.25, 0.999, 1.5])
@pytest.mark.parametrize("heartbeat", [(1.0, 3.0), (0.5, 2.0), (0.25, 1.0)])
def test_a_partitioned_link_is_cut_after_the_timeout_not_before(
    heartbeat: tuple[float, float], heard_at: float
) -> None:
    interval, timeout = heartbeat
    fabric, a, b = pair(heartbeat=heartbeat)
    heard = _partition_at(fabric, a, b, heard_at)
    noted = math.floor(heard / interval + 1) * interval  # the first tick after it
    cut = noted + math.floor(timeout / interval + 1) * interval  # first tick past the timeout
    assert timeout + interval < cut - heard <= timeout + 2 * interval
    fabric.advance(cut - heard - 1e-6)
    assert a.log() == [] and b.log() == [], "cut before the heartbeat timeout"
    fabric.advance(1e-6)
    assert a.log() == [BROKEN]
    assert b.log() == [BROKEN]
    assert a.c.node.nic.wire.links == {} and b.c.node.nic.wire.links == {}


def test_the_exact_tick_of_the_cut() -> None:
    """Heard at 0.3; noted at the tick of 1.0; 2.0, 3.0 and 4.0 are within 3 s of it; the
    tick of 5.0 is past it: the link is cut at 5.0 exactly, 4.7 s after the last frame."""
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    _partition_at(fabric, a, b, 0.3)
    fabric.advance(4.7 - 1e-9)
    assert a.log() == [] and b.log() == []
    fabric.advance(1e-9)
    assert fabric.now() == pytest.approx(5.0)
    assert a.log() == [BROKEN] and b.log() == [BROKEN]


def test_each_side_cuts_by_its_own_timeout() -> None:
    """The stream's end is lost in the partition too: each side decides alone."""
    fabric = Fabric()
    n1, n2 = (
        fabric.add_node("n1", heartbeat=(1.0, 3.0)),
        fabric.add_node("n2", heartbeat=(1.0, 6.0)),
    )
    a, b = side(fabric, n1), side(fabric, n2)
    connect(fabric, a, b)
    fabric.partition(n1, n2)  # last heard at 0: noted at 1.0
    fabric.advance(5.0)
    assert a.log() == [BROKEN] and b.log() == []
    fabric.advance(2.9)
    assert b.log() == []
    fabric.advance(0.1)  # 8.0 - 1.0 > 6.0
    assert b.log() == [BROKEN]


def test_outstanding_dtos_complete_once_when_the_link_is_cut() -> None:
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    fabric.partition(a.c.node, b.c.node)
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0)
    a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(8, 8)], 2, b.rmr(8, 8), 0)
    b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(0, 8)], 3, None, 0)
    fabric.advance(4.99)
    assert a.log() == [] and b.log() == []
    fabric.advance(0.01)
    assert a.log() == [(DTO, 1, St.DTO_ERR_TRANSPORT, 0), BROKEN, (DTO, 2, St.DTO_ERR_FLUSHED, 0)]
    assert b.log() == [BROKEN, (DTO, 3, St.DTO_ERR_FLUSHED, 0)]
    fabric.advance(30.0)
    assert a.log() == [] and b.log() == []


def test_a_link_that_keeps_hearing_is_never_cut() -> None:
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    fabric.advance(600.0)
    assert a.log() == [] and b.log() == []
    assert len(_heartbeats(fabric)) == 2 * 599
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 8)], 1, b.rmr(0, 8), 0)
    fabric.run()
    assert a.log() == [(DTO, 1, St.DTO_SUCCESS, 8)]


def test_one_way_loss_is_cut_by_the_side_that_hears_nothing() -> None:
    """n1 -> n2 is lost, n2 -> n1 still carries n2's heartbeats: n1 keeps hearing, n2 hears
    nothing and cuts the link; its stream's end reaches n1."""
    fabric, a, b = pair(heartbeat=(1.0, 3.0))
    fabric.pipe(a.c.node, b.c.node).cut = True
    fabric.advance(4.99)
    assert a.log() == [] and b.log() == []
    fabric.advance(0.01)
    assert b.log() == [BROKEN]
    assert a.log() == [BROKEN]


def test_a_link_that_never_said_hello_is_cut_after_one_heartbeat_timeout() -> None:
    """dat_ep_connect (infinite timeout) whose HELLO is blackholed: neither side ever hears
    HELLO, so neither authenticates nor sends HEARTBEAT, and each cuts the link at the first
    tick past one heartbeat timeout from the stream's start (issue: half-open streams).
    Connected at 0; the tick of 3.0 is 3 s after it (not past 3 s), the tick of 4.0 is past it:
    the active side sees UNREACHABLE at 4.0 exactly."""
    fabric = Fabric()
    n1, n2 = (fabric.add_node(n, heartbeat=(1.0, 3.0)) for n in ("n1", "n2"))
    a, b = side(fabric, n1), side(fabric, n2)
    b.c.call(b.c.core.psp_create(1, b.evd, PspFlags.CONSUMER))
    add_rule(a.c, action="blackhole", op="CM")  # n1's HELLO and challenge never leave
    a.c.call(a.c.core.ep_connect(a.ep, address(n2), 1, 0xFFFFFFFF, b""))
    assert len(n1.nic.wire.links) == len(n2.nic.wire.links) == 1
    fabric.advance(4.0 - 1e-6)
    assert a.log() == [] and b.log() == []
    assert a.c.core.eps[a.ep].state == EpState.ACTIVE_CONNECTION_PENDING
    assert len(n1.nic.wire.links) == len(n2.nic.wire.links) == 1, "cut before the timeout"
    assert _heartbeats(fabric) == [] and fabric.trace == [], "nothing crossed, not even a beat"
    fabric.advance(1e-6)
    assert fabric.now() == pytest.approx(4.0)
    assert a.log() == [(E.CONNECTION_EVENT_UNREACHABLE, b"")]
    assert n1.nic.wire.links == {} and n2.nic.wire.links == {}
    assert b.log() == []
