"""Where the kernel ran each process of a benchmark: the CPU its main thread was on in each
sample that found it runnable (``/proc/PID/task/PID/stat``: its state and its processor), as
shares per CPU.

    python -m bench.placement PID...    (samples until its stdin ends; prints one JSON line)

It samples from a process of its own, every SAMPLE_S, so the processes it watches lose no
interpreter time to it (it takes some CPU of the machine: bench.breakdown runs it only when
asked, ``--placement``)."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections import Counter
from types import TracebackType

SAMPLE_S = 1e-3


def runnable_on(pid: int) -> int | None:
    """The CPU of the process's main thread if it is runnable now, else None (asleep, gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[36]) if fields[0] == "R" else None  # stat fields 3 and 39


def main(argv: list[str] | None = None) -> None:
    """Sample the PIDs in ``argv`` until stdin ends; print {pid: {cpu: samples}} as JSON."""
    pids = [int(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    seen: dict[int, Counter[int]] = {pid: Counter() for pid in pids}
    while not select.select([sys.stdin], [], [], SAMPLE_S)[0]:
        for pid in pids:
            cpu = runnable_on(pid)
            if cpu is not None:
                seen[pid][cpu] += 1
    print(json.dumps({pid: dict(counts) for pid, counts in seen.items()}))


class Placement:
    """bench.placement over a stretch of a run: ``with Placement(pids) as p:`` ... then
    ``p.line()``; ``pids`` names each process."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.samples: dict[str, dict[int, int]] = {}
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Placement:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.placement", *map(str, self.pids.values())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self._proc = self._proc, None
        assert proc is not None
        out, _ = proc.communicate("", timeout=30)  # the end of its stdin stops it
        by_pid = json.loads(out)
        self.samples = {
            name: {int(cpu): n for cpu, n in by_pid[str(pid)].items()}
            for name, pid in self.pids.items()
        }

    def line(self) -> str:
        """Each process's runnable samples by CPU, as shares, most first."""
        parts = []
        for name, counts in self.samples.items():
            total = sum(counts.values()) or 1
            ranked = sorted(counts.items(), key=lambda kv: -kv[1])
            shares = ", ".join(f"CPU {cpu} {n / total:.0%}" for cpu, n in ranked) or "none"
            parts.append(f"{name} {shares}")
        return "  where each ran (its runnable samples by CPU): " + "; ".join(parts)


if __name__ == "__main__":
    main()
