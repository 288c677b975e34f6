"""The in-memory fabric is deterministic: the same workload gives the same frames, in the same
order, at the same moments of the manual clock; and a bug in a handler is the daemon's internal
error (logged with its traceback), never the caller's."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from fabricd.nic.objects import Consumer
from fabricd.nic.routes import route
from proto.constants import Dtos, MemPriv
from proto.errors import DatInternalError
from proto.schema import Empty
from tests.core.flows import add_rule, pair
from tests.core.harness import Fabric

Trace = list[tuple[str, str, str, list[Any], int]]


def _workload(seed: int) -> Trace:
    """Writes, reads, sends and a bind under seeded drops and duplicates, with heartbeats: the
    frames that crossed, then each side's events."""
    fabric, a, b = pair(Fabric(seed))
    add_rule(a.c, seed=seed, action="drop", probability=0.3, name="flaky")
    add_rule(b.c, seed=seed, action="duplicate", probability=0.3, name="twice")
    rmr = b.c.call(b.c.core.rmr_create(b.pz))
    b.c.call(
        b.c.core.rmr_bind(rmr, b.lmr.handle, b.triplet(0, 512), MemPriv.REMOTE_WRITE, b.ep, 1, 0)
    )
    for i in range(12):
        b.c.post(Dtos.RECEIVE, b.ep, [b.triplet(1024, 64)], i, None, 0)
        a.c.post(Dtos.SEND, a.ep, [a.triplet(0, 8)], 100 + i, None, 0)
        a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 64)], 200 + i, b.rmr(64 * i, 64), 0)
        a.c.post(Dtos.RDMA_READ, a.ep, [a.triplet(64, 32)], 300 + i, b.rmr(2048, 32), 0)
        fabric.advance(0.3)
    fabric.advance(5.0)
    return [
        *fabric.trace,
        ("events", "n1", "", list(a.log()), 0),
        ("events", "n2", "", list(b.log()), 0),
    ]


def test_the_same_workload_twice_gives_the_same_frames() -> None:
    first = _workload(3)
    assert len(first) > 70
    assert first == _workload(3)
    assert first != _workload(4), "the seed is what decides, so a different one shows"


def test_a_handler_bug_is_an_internal_error_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _fabric, a, _ = pair()
    nic = a.c.node.nic

    def broken(consumer: Consumer, args: Empty) -> list[object]:
        raise TypeError("a bug, not the caller's argument")

    nic.calls["pz_create"] = route(Empty, broken)
    with caplog.at_level(logging.ERROR, logger="fabricd"), pytest.raises(DatInternalError):
        a.c.call(a.c.core.pz_create())
    (entry,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert entry.exc_info is not None and entry.exc_info[0] is TypeError
    assert "pz_create" in entry.getMessage()
    assert type(a.c.call(a.c.core.rmr_create(a.pz))) is int, "the IA goes on serving"
