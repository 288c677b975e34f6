"""client/_ringtake.c, a run of the client's common completions read in C, against the rules in
Python: for event queues of entries drawn from every field the run looks at, it returns exactly
the plain DTO completions up to the first other entry, each the Event the entry's fields make,
with the count of those that notify and ClientCore.refill's running mean of their lengths; a
run past the ring or arguments of the wrong kind raise, reading nothing."""

from __future__ import annotations

import random
from typing import Any

import pytest

from client import _ringtake as ringtake
from client.records import POLL_BULK, Event, mean_step
from proto.constants import EventNumber
from proto.eventq import EQ_ENTRY_SIZE, EQE, NOTIFIES, SRQ_RECEIVE
from proto.hostif import SLOTS

ENTRIES = 16
DTO = EventNumber.DTO_COMPLETION_EVENT
EVD = 7


def _queue(rng: random.Random) -> tuple[memoryview, list[tuple[int, ...]]]:
    """An event queue of entries, mostly plain completions, now and then one that is not
    (another event, a reserved byte, a body, an SRQ's receive)."""
    view = memoryview(bytearray(SLOTS + ENTRIES * EQ_ENTRY_SIZE))
    heads: list[tuple[int, ...]] = []
    for i in range(ENTRIES):
        number, rsvd, size = int(DTO), 0, 0
        flags = rng.choice((0, NOTIFIES, NOTIFIES | 0x80))
        odd = rng.random()
        if odd < 0.05:
            number = rng.choice((int(EventNumber.SOFTWARE_EVENT), 0, 2**32 - 1))
        elif odd < 0.08:
            rsvd = rng.randrange(1, 256)
        elif odd < 0.11:
            size = rng.choice((1, 2**16 - 1))
        elif odd < 0.14:
            flags |= SRQ_RECEIVE
        head = (number, flags, rsvd, size, rng.randrange(2**32), rng.randrange(2**32),
                rng.randrange(2**64), rng.choice((0, 1, 64, 4096, 2**32 - 1)),
                rng.randrange(2**32))  # fmt: skip
        EQE.pack_into(view, SLOTS + i * EQ_ENTRY_SIZE, *head)
        heads.append(head)
    return view, heads


def _expected(heads: list[tuple[int, ...]], mean: int) -> tuple[list[Event], int, int]:
    """What ClientCore.refill made of a run in Python before the C path."""
    events, notifies = [], 0
    for number, flags, rsvd, size, ep, status, cookie, length, op in heads:
        if number != DTO or rsvd or size or flags & SRQ_RECEIVE:
            break
        notify = bool(flags & NOTIFIES)
        events.append(Event(DTO, EVD, ep, cookie, status, length, op, notify=notify))
        notifies += flags & NOTIFIES
        mean = mean_step(mean, length)
    return events, notifies, mean


@pytest.mark.parametrize("seed", range(200))
def test_a_run_is_the_plain_completions_up_to_the_first_other_entry(seed: int) -> None:
    rng = random.Random(seed)
    view, heads = _queue(rng)
    first = rng.randrange(ENTRIES + 1)
    count = rng.randrange(ENTRIES - first + 1)
    mean = rng.choice((0, 64, 4096, 2**32))
    events, notifies, got_mean = ringtake.completions(view, first, count, Event, DTO, EVD, mean)
    want = _expected(heads[first : first + count], mean)
    assert (events, notifies, got_mean) == want
    assert all(type(e) is Event and e.private_data == b"" and e.cr == 0 for e in events)


def _lengths(*lengths: int) -> memoryview:
    view = memoryview(bytearray(SLOTS + len(lengths) * EQ_ENTRY_SIZE))
    for i, length in enumerate(lengths):
        EQE.pack_into(view, SLOTS + i * EQ_ENTRY_SIZE, DTO, NOTIFIES, 0, 0, 1, 0, i, length, 0)
    return view


def test_the_running_mean_steps_away_from_the_old_mean() -> None:
    _, notifies, mean = ringtake.completions(_lengths(0, 9), 0, 2, Event, DTO, EVD, 100)
    assert (notifies, mean) == (2, 77)  # 100 + floor(-12.5) = 87, 87 + floor(-9.75) = 77
    _, _, mean = ringtake.completions(_lengths(9, 100), 0, 2, Event, DTO, EVD, 0)
    assert mean == 15  # 0 + ceil(1.125) = 2, 2 + ceil(12.25) = 15


@pytest.mark.parametrize("length", [4096, POLL_BULK, 2**32 - 1])
@pytest.mark.parametrize("start", [0, 2**32])
def test_completions_of_one_length_bring_the_mean_to_it(length: int, start: int) -> None:
    """So POLL_BULK-byte completions count as bulk: steps rounded toward the old mean stopped
    up to 7 short (16,377 for 16 KiB completions, whose waits then always spun)."""
    mean = start
    for _ in range(32):
        _, _, mean = ringtake.completions(_lengths(*[length] * 8), 0, 8, Event, DTO, EVD, mean)
    assert mean == length
    mean = start  # the SRQ receives' step, in Python, from the same start
    for _ in range(256):
        mean = mean_step(mean, length)
    assert mean == length


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0, ENTRIES + 1), ValueError),  # past the ring's last slot
        ((ENTRIES, 1), ValueError),
        ((2**62, 2**62), ValueError),  # a sum that would overflow
        ((-1, 1), ValueError),
        ((0, -1), ValueError),
    ],
)
def test_a_run_past_the_ring_raises(args: tuple[int, int], error: type[Exception]) -> None:
    view = memoryview(bytearray(SLOTS + ENTRIES * EQ_ENTRY_SIZE))
    with pytest.raises(error):
        ringtake.completions(view, *args, Event, DTO, EVD, 0)


@pytest.mark.parametrize(
    "args",
    [
        (b"short", 0, 1, Event, DTO, EVD, 0),  # a view shorter than the ring's header
        (bytearray(SLOTS + EQ_ENTRY_SIZE), 0, 1, "Event", DTO, EVD, 0),  # no class
        (bytearray(SLOTS + EQ_ENTRY_SIZE), 0, 1, Event, "1", EVD, 0),  # no event number
        (bytearray(SLOTS + EQ_ENTRY_SIZE), 0, 1, Event, DTO, EVD, "0"),  # no mean
        (bytearray(SLOTS + EQ_ENTRY_SIZE), 0, 1, Event, DTO, EVD, -1),  # no mean of lengths
        (bytearray(SLOTS + EQ_ENTRY_SIZE), 0, 1, Event, DTO, EVD, 2**32 + 1),
        (None, 0, 1, Event, DTO, EVD, 0),  # no buffer
        (bytearray(SLOTS + EQ_ENTRY_SIZE), 0, 1, Event, DTO, EVD),  # one argument short
    ],
)
def test_arguments_of_the_wrong_kind_raise(args: tuple[Any, ...]) -> None:
    with pytest.raises((TypeError, ValueError)):
        ringtake.completions(*args)
