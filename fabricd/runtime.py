"""Settings of the daemon's own process: cheaper per-operation Python, a scheduling policy that
leaves the CPU to the processes that wake it, and the CPUs it runs on (the daemon's process
only: a consumer's process is its user's, and the client changes nothing there)."""

from __future__ import annotations

import enum
import os
import sys

SCHEDULING = {"batch": getattr(os, "SCHED_BATCH", None), "normal": getattr(os, "SCHED_OTHER", None)}


def plain_enum_access() -> bool:
    """Drop Python 3.11's ``EnumType.__getattr__``, which 3.12 removed: with it every attribute
    read on every enum class (``Dtos.SEND``, ``EpState.CONNECTED``) goes through a Python-level
    lookup hook, ~105 ns against ~20 ns for any other class attribute (timeit), and the data
    path reads such members tens of times per operation. In 3.11 a member is in its class's
    dict already (itself, or a property that returns it), so the hook only ever supplied an
    AttributeError; with it gone a missing name still raises one. True if it was removed."""
    if sys.version_info >= (3, 12) or "__getattr__" not in vars(enum.EnumType):
        return False
    delattr(enum.EnumType, "__getattr__")
    return True


def scheduling(policy: str) -> str | None:
    """Run the daemon (and the threads it starts later) under ``policy``; why not, if it cannot.

    ``batch`` (SCHED_BATCH, the default) keeps the daemon from preempting the task that woke
    it: a NIC does not take the CPU from the program that rings its doorbell. Under Linux's
    default policy every doorbell, ACK or completion a process sends wakes its reader, which
    then preempts the sender mid-burst: a consumer posting a window rings, its daemon takes
    the few WQEs posted so far and sends them as a frame of their own, their completions come
    back a few at a time, and the next refill is as small; on two cores the daemons then spend
    twice the CPU per operation (64 B Sends at window 64: 5-12 WQEs a look, every look a
    doorbell's, 47k-57k/s; docs/performance.md, the ninth session, has the A/B).
    Asking for SCHED_BATCH needs no privilege (sched(7))."""
    chosen = SCHEDULING[policy]
    if chosen is None:
        return f"no {policy} scheduling policy on this platform"
    try:
        os.sched_setscheduler(0, chosen, os.sched_param(0))
    except OSError as err:
        return f"{policy} scheduling refused: {err.strerror}"
    return None


def cpu_list(text: str) -> frozenset[int]:
    """A CPU list as taskset(1) and /proc's Cpus_allowed_list write it ("1", "0,2", "0-3,6");
    ValueError for anything else."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list (such as 1, 0,2 or 0-3)")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise ValueError(f"{part!r} runs backwards")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def pin(cpus: frozenset[int]) -> str | None:
    """Run the daemon (and the threads it starts later) on ``cpus`` only, as a NIC has its own
    processor; why not, if it cannot (a CPU this machine or its cgroup does not offer).

    On one machine the kernel wakes a daemon on the CPU of the process that woke it whenever
    no CPU is idle, and a consumer that polls its completions keeps one busy: both daemons
    then take turns on the other CPU. Pinned each to a CPU of its own (``fabricctl bench
    --daemon-cpus``), two nodes' daemons overlap as two hosts' NICs do (docs/performance.md,
    the twenty-third session, has the measurements and what it costs)."""
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as err:
        return f"CPUs {sorted(cpus)} refused: {err.strerror}"
    return None
