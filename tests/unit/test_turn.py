"""fabricd.turn.Turn: the work an input batch defers and the frames it corks run when the batch
ends, in order; a batch that landed a bulk payload leaves them to the next loop iteration, and
any batch that ends inline first runs what earlier batches left. Idle work (a moderated wake-up)
waits for a loop iteration that read nothing, within its bounds."""

from __future__ import annotations

import asyncio

import pytest

from fabricd.turn import Turn


def _batch(turn: Turn, log: list[str], name: str, later: bool = False) -> None:
    turn.begin()
    turn.call_soon(lambda: log.append(f"{name} work"))
    turn.cork(lambda: log.append(f"{name} flush"))
    turn.end(later=later)


def test_a_batch_runs_its_work_then_its_flushes_when_it_ends() -> None:
    async def main() -> list[str]:
        turn, log = Turn(), list[str]()
        _batch(turn, log, "a")
        return log

    assert asyncio.run(main()) == ["a work", "a flush"]


def test_a_bulk_batch_leaves_its_work_to_the_next_iteration_in_order() -> None:
    async def main() -> tuple[list[str], list[str]]:
        turn, log = Turn(), list[str]()
        _batch(turn, log, "a", later=True)
        _batch(turn, log, "b", later=True)
        during = list(log)
        await asyncio.sleep(0)
        return during, log

    during, after = asyncio.run(main())
    assert during == []
    assert after == ["a work", "b work", "a flush", "b flush"]


def test_the_turn_is_idle_only_with_no_batch_running_or_left_for_later() -> None:
    """What a peer stream asks before it answers a read at once (its ACK must overtake
    nothing corked)."""

    async def main() -> list[bool]:
        turn, seen = Turn(), list[bool]()
        seen.append(turn.idle)
        turn.begin()
        seen.append(turn.idle)
        turn.end(later=True)  # its work waits for the next iteration
        seen.append(turn.idle)
        await asyncio.sleep(0)
        seen.append(turn.idle)
        return seen

    assert asyncio.run(main()) == [True, False, False, True]


def test_an_inline_batch_first_runs_what_a_bulk_batch_left() -> None:
    async def main() -> list[str]:
        turn, log = Turn(), list[str]()
        _batch(turn, log, "a", later=True)
        _batch(turn, log, "b")
        await asyncio.sleep(0)  # the scheduled run finds nothing left
        _batch(turn, log, "c")
        return log

    assert asyncio.run(main()) == [
        "a work",
        "b work",
        "a flush",
        "b flush",
        "c work",
        "c flush",
    ]


def test_outside_a_batch_work_goes_to_the_event_loop() -> None:
    async def main() -> tuple[list[str], list[str]]:
        turn, log = Turn(), list[str]()
        turn.call_soon(lambda: log.append("timer work"))
        during = list(log)
        await asyncio.sleep(0)
        return during, log

    during, after = asyncio.run(main())
    assert during == [] and after == ["timer work"]


def test_a_frame_corked_outside_a_batch_leaves_at_once_unless_a_batch_left_work() -> None:
    """What a peer stream's read answered at once sends leaves as it is sent; after a bulk
    batch that left its work for the next iteration, it waits to leave after that work."""

    async def main() -> tuple[list[str], list[str]]:
        turn, log = Turn(), list[str]()
        turn.cork(lambda: log.append("at once"))
        _batch(turn, log, "bulk", later=True)
        turn.cork(lambda: log.append("behind bulk"))
        during = list(log)
        await asyncio.sleep(0)
        return during, log

    during, after = asyncio.run(main())
    assert during == ["at once"]
    assert after == ["at once", "bulk work", "bulk flush", "behind bulk"]


def test_work_from_outside_a_batch_is_a_batch_whose_frames_leave_when_it_returns() -> None:
    """A look in a later iteration (call_next, or call_soon outside a batch) that takes a
    request: the work it defers runs, then its frame leaves, before anything the event loop
    was given after it, not one iteration later."""

    async def main() -> list[str]:
        turn, log = Turn(), list[str]()
        loop = asyncio.get_running_loop()

        def look(name: str) -> None:
            log.append(f"{name} look")
            turn.call_soon(lambda: log.append(f"{name} work"))
            turn.cork(lambda: log.append(f"{name} flush"))
            loop.call_soon(lambda: log.append(f"after {name}"))

        turn.call_next(lambda: look("next"))
        turn.call_soon(lambda: look("soon"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return log

    assert asyncio.run(main()) == [
        "next look",
        "next work",
        "next flush",
        "soon look",
        "soon work",
        "soon flush",
        "after next",
        "after soon",
    ]


def test_nested_batches_end_with_the_outermost() -> None:
    async def main() -> tuple[list[str], list[str]]:
        turn, log = Turn(), list[str]()
        turn.begin()
        _batch(turn, log, "inner")
        during = list(log)
        turn.end()
        return during, log

    during, after = asyncio.run(main())
    assert during == [] and after == ["inner work", "inner flush"]


def test_deferred_work_that_fails_is_logged_and_the_rest_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fail() -> None:
        raise RuntimeError("a handler bug")

    async def main() -> list[str]:
        turn, log = Turn(), list[str]()
        turn.begin()
        turn.call_soon(fail)
        turn.call_soon(lambda: log.append("next work"))
        turn.cork(lambda: log.append("flush"))
        turn.end()
        return log

    assert asyncio.run(main()) == ["next work", "flush"]
    assert "a handler bug" in caplog.text


def _idle_log(turn: Turn, log: list[str], name: str) -> None:
    def work() -> None:
        log.append(f"{name} work")
        turn.cork(lambda: log.append(f"{name} flush"))

    turn.call_idle(work)


def test_idle_work_runs_once_an_iteration_reads_nothing_in_order_and_corked() -> None:
    async def main() -> list[list[str]]:
        turn, log = Turn(), list[str]()
        _idle_log(turn, log, "a")
        _idle_log(turn, log, "b")
        seen = []
        for reads in (1, 1, 0):  # the loop reads in two iterations, then in none
            for _ in range(reads):
                turn.read()
            await asyncio.sleep(0)
            seen.append(list(log))
        return seen

    assert asyncio.run(main()) == [[], [], ["a work", "b work", "a flush", "b flush"]]


def test_idle_work_waits_no_more_than_its_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fabricd.turn.IDLE_ROUNDS", 3)
    monkeypatch.setattr("fabricd.turn.IDLE_WAIT", 60.0)

    async def main() -> int:
        turn, log = Turn(), list[str]()
        _idle_log(turn, log, "a")
        for iteration in range(1, 10):
            turn.read()  # input in every iteration
            await asyncio.sleep(0)
            if log:
                return iteration
        return 0

    assert asyncio.run(main()) == 3


def test_idle_work_waits_no_longer_than_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fabricd.turn.IDLE_WAIT", 0.0)

    async def main() -> list[str]:
        turn, log = Turn(), list[str]()
        _idle_log(turn, log, "a")
        turn.read()
        await asyncio.sleep(0)
        return log

    assert asyncio.run(main()) == ["a work", "a flush"]


def test_a_turn_outliving_its_event_loop_uses_the_next_one() -> None:
    """The loop is looked up once (not per batch), yet a closed one is never used again."""
    turn, log = Turn(), list[str]()

    async def bulk(name: str) -> None:
        _batch(turn, log, name, later=True)
        await asyncio.sleep(0)

    asyncio.run(bulk("first"))
    asyncio.run(bulk("second"))
    assert log == ["first work", "first flush", "second work", "second flush"]
