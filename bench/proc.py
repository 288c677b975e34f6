"""What a process has used so far, read from /proc: its threads' time on a CPU (each one's
schedstat, in nanoseconds), that time split into user and kernel (stat, in clock ticks: 10 ms
each, so only long runs split it well), and its context switches."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """A process's counters at one moment (seconds, switches)."""

    cpu: float  # on a CPU: exact
    user: float  # the part in user space (clock ticks)
    kernel: float  # the part in the kernel (clock ticks)
    slept: int  # voluntary context switches: it waited
    preempted: int  # involuntary ones

    def line(self, name: str, before: Usage, ops: int) -> str:
        """What the process spent per operation since ``before``, as one line."""
        us = 1e6 / ops
        return (
            f"  {name:<13} per operation: CPU {(self.cpu - before.cpu) * us:5.2f} us"
            f" (user {(self.user - before.user) * us:4.1f}, kernel"
            f" {(self.kernel - before.kernel) * us:4.1f}); wake-ups"
            f" {(self.slept - before.slept) / ops:.2f}, preempted"
            f" {(self.preempted - before.preempted) / ops:.2f}"
        )


def usage(pid: int) -> Usage:
    """A process's counters now."""
    on_cpu = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):  # uvloop's worker threads too
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                on_cpu += int(f.read().split()[0]) / 1e9
        except FileNotFoundError:
            pass  # the thread ended meanwhile
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        switches = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
    return Usage(
        on_cpu,
        int(fields[11]) / tick,
        int(fields[12]) / tick,
        int(switches["voluntary_ctxt_switches"]),
        int(switches["nonvoluntary_ctxt_switches"]),
    )
