"""bench.syscalls' core: perf's trace lines read as system calls, and the stages of each
window-1 round trip found in them (perf itself runs in tests/integration/test_bench_smoke.py)."""

from __future__ import annotations

from bench.syscalls import SPLIT, STAGES, Call, parse, round_trips, table

INI, TGT, CON = 100, 200, 300  # the initiator's daemon, the target's, the consumer
SLEEP = "epfd: 0x3, events: 0x7f, maxevents: 0x400, timeout: 0x0000027c, sigmask: 0x0"
POLL = "epfd: 0x3, events: 0x7f, maxevents: 0x400, timeout: 0x00000000, sigmask: 0x0"


def _line(pid: int, us: float, point: str, trace: str = "") -> str:
    return f"{pid:>6} {us / 1e6:.6f}: syscalls:sys_{point}: {trace}"


def _round_trip(t0: float, polls: int = 0) -> list[str]:
    """One round trip's lines from the initiator's write of a request at ``t0`` (us)."""
    lines = [
        _line(TGT, t0 - 5, "enter_epoll_pwait", SLEEP),  # the target sleeps until the request
        _line(INI, t0, "enter_write", "fd: 0x00000018, buf: 0x7f00, count: 0x00000059"),
        _line(INI, t0 + 20, "enter_epoll_pwait", SLEEP),
        _line(TGT, t0 + 25, "exit_epoll_pwait", "0x1"),
        _line(TGT, t0 + 30, "enter_read", "fd: 0x00000019, buf: 0x1000, count: 0x00004000"),
        _line(TGT, t0 + 33, "exit_read", "0x59"),
        _line(TGT, t0 + 50, "enter_write", "fd: 0x00000019, buf: 0x2000, count: 0x0000000b"),
        _line(INI, t0 + 76, "exit_epoll_pwait", "0x1"),
        _line(INI, t0 + 80, "enter_read", "fd: 0x00000018, buf: 0x1000, count: 0x00004000"),
        _line(INI, t0 + 82, "exit_read", "0xb"),
        _line(INI, t0 + 90, "enter_sched_yield"),
    ]
    for i in range(polls):
        lines += [
            _line(INI, t0 + 100 + i, "enter_epoll_pwait", POLL),
            _line(INI, t0 + 100 + i, "exit_epoll_pwait", "0x0"),
        ]
    return lines


def test_trace_lines_are_read_as_calls() -> None:
    calls = parse(_round_trip(1000.0, polls=1))
    assert [(c.pid, c.what) for c in calls] == [
        (TGT, "sleep"),
        (INI, "write"),
        (INI, "sleep"),
        (TGT, "woke"),
        (TGT, "read"),
        (TGT, "write"),
        (INI, "woke"),
        (INI, "read"),
        (INI, "yield"),
        (INI, "poll"),
    ]  # a poll's return is no wake-up
    assert calls[1] == Call(1000.0, INI, "write", 0x18, 0x59)
    assert (calls[4].fd, calls[4].n, calls[7].n) == (0x19, 0x59, 0xB)


def test_each_stage_of_a_round_trip_is_timed_from_the_one_before() -> None:
    lines = [*_round_trip(1000.0, polls=2), *_round_trip(1150.0, polls=1)]
    lines.append(_line(INI, 1300.0, "enter_write", "fd: 0x18, buf: 0x7f00, count: 0x59"))
    trips = round_trips(parse(lines), INI, TGT)
    assert trips.writes == 3 and trips.count == 2
    assert [values[0] for values in trips.stages] == [25.0, 8.0, 17.0, 26.0, 6.0, 68.0]
    assert trips.whole == [150.0, 150.0]
    assert trips.polls["initiator"] == 3 and trips.yields["initiator"] == 2
    assert trips.polls["target"] == 0


def test_a_round_trip_missing_a_stage_does_not_count() -> None:
    """The target's read of the request was not traced (perf started mid-way): that round
    trip is left out; a read of another fd (the consumer's socket) is no stage."""
    first = [line for line in _round_trip(1000.0) if "exit_read: 0x59" not in line]
    other = [
        _line(INI, 1081.0, "enter_read", "fd: 0x00000007, buf: 0x1000, count: 0x00004000"),
        _line(INI, 1081.5, "exit_read", "0x10"),
    ]
    lines = [*first, *_round_trip(1150.0), *other]
    lines.append(_line(INI, 1300.0, "enter_write", "fd: 0x18, buf: 0x7f00, count: 0x59"))
    trips = round_trips(parse(lines), INI, TGT)
    assert trips.count == 1 and trips.whole == [150.0]


def test_the_table_names_every_stage_and_the_rtt() -> None:
    lines = [*_round_trip(1000.0), _line(INI, 1150.0, "enter_write", "fd: 0x18, count: 0x59")]
    out = table(round_trips(parse(lines), INI, TGT), "RDMA Write", 64, 140.0, 45.0)
    assert "1 complete round trips of 2 traced" in out
    assert "median post to completion 140.0 us; bench.limits request-reply RTT 45.0 us" in out
    for start, end in STAGES:
        assert f"{start:<40} {end:<38}" in out
    assert "the round trip, traced" in out


def test_the_initiators_turn_is_split_where_the_consumers_yields_pause() -> None:
    """The consumer yields every 3 us while it waits; it stops at 1090 (it has its
    completion, posts, starts its next wait) and yields again from 1110: the initiator's turn
    (its read at 1082, its write at 1150) is 8 us to that last look, 20 us of the consumer's,
    40 us to the write."""
    looks = [1060.0 + 3 * i for i in range(11)] + [1110.0 + 3 * i for i in range(5)]
    lines = [
        *_round_trip(1000.0),
        *(_line(CON, at, "enter_sched_yield") for at in looks),
        _line(INI, 1150.0, "enter_write", "fd: 0x18, buf: 0x7f00, count: 0x59"),
    ]
    calls = sorted(parse(lines), key=lambda c: c.at)
    trips = round_trips(calls, INI, TGT, CON)
    assert [values for values in trips.split] == [[8.0], [20.0], [40.0]]
    assert round_trips(calls, INI, TGT).split == [[], [], []]  # no consumer named
    out = table(trips, "RDMA Write", 64, 140.0, 45.0)
    for start, end in SPLIT:
        assert f"{start:<40} {end:<38}" in out
