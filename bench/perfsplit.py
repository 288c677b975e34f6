"""Where each process's CPU went, by the code it ran: ``perf record`` samples of the processes
of a run, split by the object each sample fell in (the kernel, the Python interpreter, uvloop,
msgpack, the project's C extensions, libc), for bench.breakdown's ``--perf``.

perf's cpu-clock event samples a process at a fixed rate while it is on a CPU (a virtual
machine has no hardware cycle counter to offer), so a part's share of a process's samples is
its share of that process's CPU time; bench.breakdown turns the shares into microseconds per
operation with the CPU time it reads from /proc.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Final

PARTS: Final = (
    "kernel",
    "interpreter",
    "uvloop",
    "msgpack",
    "project C",
    "libc",
    "other",
)
"""The parts a process's CPU is split into, in the order they are printed."""

PROJECT_C: Final = ("_plaintake", "_lanes", "_landing", "_rows", "_scatter", "_ringpost",
                    "_ringtake")  # fmt: skip
"""The project's own C extensions (fabricd/, proto/, client/), by module name."""

RATE: Final = 1999  # samples a second of CPU: ~500 us apart, light enough not to move the run

_ROW = re.compile(r"^\s*([\d.]+)%\s+(\d+):\S*\s+(.+?)\s*$")


def part(dso: str) -> str:
    """The part of PARTS a shared object (perf's dso column) counts in."""
    if dso.startswith("[kernel"):
        return "kernel"
    name = dso.rsplit("/", 1)[-1]
    if name.startswith(("python3", "libpython3")):
        return "interpreter"
    if name.startswith("loop.cpython"):
        return "uvloop"
    if name.startswith("_cmsgpack"):
        return "msgpack"
    if name.split(".", 1)[0] in PROJECT_C:
        return "project C"
    if name.startswith(("libc.so", "libc-", "[vdso]")):
        return "libc"  # with the vDSO: the clock reads libc makes without a system call
    return "other"


def parse(lines: Iterable[str]) -> dict[int, dict[str, float]]:
    """``perf report --sort pid,dso`` rows as each process's share of its own samples by
    part (shares of one process add up to 1)."""
    samples: dict[int, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PARTS, 0.0))
    for line in lines:
        row = _ROW.match(line)
        if row is None:
            continue
        percent, pid, dso = float(row[1]), int(row[2]), row[3]
        samples[pid][part(dso)] += percent
    shares: dict[int, dict[str, float]] = {}
    for pid, parts in samples.items():
        total = sum(parts.values())
        if total > 0:
            shares[pid] = {name: value / total for name, value in parts.items()}
    return shares


def line(name: str, shares: dict[str, float], cpu_us: float) -> str:
    """One process's CPU per operation split by part, as one line (parts under 0.05 us are
    left out)."""
    cells = [f"{p} {shares[p] * cpu_us:.1f}" for p in PARTS if shares[p] * cpu_us >= 0.05]
    return f"  {name:<13} of its {cpu_us:.2f} us: " + ", ".join(cells)


class Recording:
    """``perf record`` of ``pids`` from start until ``stop`` (then its report, parsed)."""

    def __init__(self, pids: Sequence[int], path: str) -> None:
        self.path = path
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(RATE), "-o", path]
        self.proc = subprocess.Popen(
            [*cmd, "-p", ",".join(map(str, pids))],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> dict[int, dict[str, float]]:
        """Stop recording; each process's shares by part (RuntimeError if perf failed)."""
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=60)
        if self.proc.returncode not in (0, -signal.SIGINT):
            raise RuntimeError(f"perf record failed: {err.decode(errors='replace').strip()}")
        report = subprocess.run(
            ["perf", "report", "-i", self.path, "--sort", "pid,dso", "--stdio", "-q",
             "--no-children"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return parse(report.stdout.splitlines())
