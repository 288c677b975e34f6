"""The pure fault engine: matching, reproducible decisions, delays, replay."""

from __future__ import annotations

import json

import pytest

from fabricd.faults import FaultEngine, Message, chance
from proto.faultrules import Rule, replay_rules


def _msg(number: int, op: str = "RDMA_WRITE", size: int = 64) -> Message:
    return Message("n1", "n2", 3, number, op, size, 0x1234, number)


def test_decisions_depend_on_seed_rule_link_connection_and_number_only() -> None:
    def fired(seed: int) -> list[int]:
        engine = FaultEngine(seed)
        engine.add(Rule("r", "drop", probability=0.3))
        return [n for n in range(1, 200) if engine.decide(_msg(n), now=n * 0.37)]

    assert fired(7) == fired(7), "the clock plays no part"
    assert fired(7) != fired(8)
    assert 30 < len(fired(7)) < 90
    assert chance(1, "r", "a", "b", 1, 1) != chance(1, "r", "b", "a", 1, 1), "links are directed"


def test_active_follows_the_rules_through_every_writer() -> None:
    """``active`` is a word the data path reads instead of the rules: add, remove and clear
    keep it."""
    engine = FaultEngine()
    assert not engine.active
    engine.add(Rule("a", "drop"))
    engine.add(Rule("b", "drop"))
    assert engine.active
    assert engine.remove("a") and engine.active, "one rule is left"
    assert not engine.remove("a") and engine.active
    assert engine.remove("b") and not engine.active
    engine.add(Rule("c", "drop"))
    engine.clear()
    assert not engine.active and not engine.rules


def test_matching_fields() -> None:
    engine = FaultEngine()
    engine.add(
        Rule(
            "w",
            "drop",
            op="RDMA_WRITE",
            src="n1",
            dst="n2",
            size_min=10,
            size_max=100,
            rmr_context=0x1234,
        )
    )
    assert engine.decide(_msg(1)) is not None
    assert engine.decide(_msg(2, op="SEND")) is None
    assert engine.decide(_msg(3, size=5)) is None
    assert engine.decide(Message("n2", "n1", 3, 4, "RDMA_WRITE", 64, 0x1234, 4)) is None


def test_nth_count_and_time_window() -> None:
    engine = FaultEngine()
    engine.add(Rule("third", "drop", nth=3))
    assert [bool(engine.decide(_msg(n))) for n in range(1, 6)] == [False, False, True, False, False]
    engine.clear()
    engine.add(Rule("twice", "drop", count=2))
    assert sum(bool(engine.decide(_msg(n))) for n in range(1, 10)) == 2
    engine.clear()
    engine.add(Rule("window", "drop", start_s=1.0, end_s=2.0), now=10.0)
    assert [bool(engine.decide(_msg(n), now=t)) for n, t in ((1, 10.5), (2, 11.5), (3, 12.5))] == [
        False,
        True,
        False,
    ]


@pytest.mark.parametrize("distribution", ["uniform", "normal", "exponential"])
def test_delays_are_reproducible_and_never_negative(distribution: str) -> None:
    engine = FaultEngine(5)
    rule = Rule("d", "delay", delay_ms=2.0, jitter_ms=3.0, distribution=distribution)
    delays = [engine.jitter(rule, _msg(n)) for n in range(1, 300)]
    assert delays == [engine.jitter(rule, _msg(n)) for n in range(1, 300)]
    assert all(d >= 0 for d in delays) and len(set(delays)) > 100
    if distribution == "uniform":
        assert all(0.002 <= d <= 0.005 for d in delays)


def test_bad_rules_are_refused() -> None:
    for bad in (
        Rule("x", "explode"),
        Rule("x", "drop", op="TELEPATHY"),
        Rule("x", "drop", probability=2.0),
        Rule("", "drop"),
        Rule("x", "bandwidth"),
        Rule("x", "delay", distribution="zipf"),
    ):
        with pytest.raises(ValueError):
            bad.validate()


def test_replay_rules_fire_at_the_logged_messages() -> None:
    def run(engine: FaultEngine) -> list[dict[str, object]]:
        for n in range(1, 100):
            rule = engine.decide(_msg(n))
            if rule:
                engine.record(rule, _msg(n))
        return [{k: v for k, v in json.loads(line).items() if k != "rule"} for line in engine.log]

    original = FaultEngine(11)
    original.add(Rule("r", "drop", probability=0.2))
    first = run(original)
    replayed = FaultEngine(999)  # another seed: a replay does not depend on it
    for rule in replay_rules(original.log):
        replayed.add(rule)
    assert first and run(replayed) == first
