"""bench.floor with its real processes: a relay on uvloop over a shared page, an echo peer."""

from __future__ import annotations

import json
import math
import time

import pytest

from bench import floor
from bench.limits import IO_TIMEOUT


def test_every_request_completes_and_the_median_is_a_time() -> None:
    us = floor.measure(200)
    assert math.isfinite(us) and us > 0


def test_a_sleeping_relay_is_woken_by_the_doorbell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its busy polling the relay sleeps (POLL 0); a post then rings the eventfd, and
    that alone must wake it: no second ring comes before the consumer gives up."""
    monkeypatch.setattr(floor, "REDOORBELL_S", IO_TIMEOUT + 1)
    with floor.shape() as (words, bell):
        floor.round_trips(words, bell, 3)
        deadline = time.monotonic() + IO_TIMEOUT
        while words[floor.POLL] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert words[floor.POLL] == 0  # asleep
        assert len(floor.round_trips(words, bell, 2)) == 2
        assert words[floor.DONE] == words[floor.POSTED] == 5


def test_main_prints_the_floor_beside_the_rtt(capsys: pytest.CaptureFixture[str]) -> None:
    floor.main(["--iters", "100", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"floor_us", "limit_rr_rtt_us"}
    assert all(math.isfinite(v) and v > 0 for v in out.values())
