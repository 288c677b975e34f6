"""Where each process's CPU went, by the code it ran: ``perf record`` samples of the processes
of a run, split by the object each sample fell in (the kernel, the Python interpreter, the
native modules mypyc compiled, uvloop, msgpack, the project's C extensions, a C program's
provider, libc), for bench.breakdown's ``--perf``.

perf's cpu-clock event samples a process at a fixed rate while it is on a CPU (a virtual
machine has no hardware cycle counter to offer), so a part's share of a process's samples is
its share of that process's CPU time; bench.breakdown turns the shares into microseconds per
operation with the CPU time it reads from /proc.
"""

from __future__ import annotations

import errno
import os
import re
import select
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Final

from bench.proc import Usage

PARTS: Final = (
    "kernel",
    "interpreter",
    "compiled",
    "uvloop",
    "msgpack",
    "project C",
    "provider",
    "libc",
    "other",
)
"""The parts a process's CPU is split into, in the order they are printed."""

PROJECT_C: Final = ("_plaintake", "_lanes", "_landing", "_receives", "_rows", "_scatter",
                    "_ringpost", "_ringtake")  # fmt: skip
"""The project's own C extensions (fabricd/, proto/, client/), by module name."""

RATE: Final = 1999  # samples a second of CPU: ~500 us apart, light enough not to move the run
START_S: Final = 10.0  # for perf to attach to the processes (or answer a command)


class PerfFailed(RuntimeError):
    """perf could not record (missing rights, gone, silent): its own words."""


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
    if name.startswith(("_cmsgpack", "libmsgpackc")):
        return "msgpack"
    if name.startswith(("libdatfabric", "libdat2")):
        return "provider"  # a C program's: libdatfabric and libdat2, which loads it
    if name.split(".", 1)[0] in PROJECT_C:
        return "project C"
    if "__mypyc." in name:
        return "compiled"  # the native modules mypyc built (proto/native.py), in one library
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


def lines(
    watch: dict[str, int],
    before: dict[str, Usage],
    after: dict[str, Usage],
    shares: dict[int, dict[str, float]],
    ops: int,
) -> list[str]:
    """``line`` for each watched process (name: pid) perf sampled: its CPU per operation
    between the two readings (bench.proc), split by its ``shares``."""
    return [
        line(name, shares[pid], (after[name].cpu - before[name].cpu) * 1e6 / ops)
        for name, pid in watch.items()
        if pid in shares
    ]


class Recording:
    """``perf record`` of every process (``-a``, split by process id afterwards), ready when
    made and paused: its samples are those taken between ``resume`` and ``stop`` (perf's
    control FIFO, ``--control``). Sampling only what was asked for from its start would miss
    the start of a run: perf takes a while to attach to processes, longer than a short run."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._ctl, ack = f"{path}.ctl", f"{path}.ack"
        os.mkfifo(self._ctl)
        os.mkfifo(ack)
        self._ack = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)  # perf's answers, as they come
        self._listening = True  # _ack still open
        cmd = ["perf", "record", "-a", "-D", "-1", "--control", f"fifo:{self._ctl},{ack}"]
        self.proc = subprocess.Popen(
            [*cmd, "-e", "cpu-clock", "-F", str(RATE), "-o", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            self._command("ping")  # answered once perf is set up
        except PerfFailed:
            self.abort()
            raise

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()  # whatever ``stop`` did not end: perf records every CPU until it goes

    def resume(self) -> None:
        """Start sampling (PerfFailed if perf does not answer)."""
        self._command("enable")

    def stop(self) -> dict[int, dict[str, float]]:
        """Stop sampling and recording; each process's shares by part (PerfFailed if perf
        failed)."""
        try:
            self._command("disable")
        finally:
            self._deaf()
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=60)
        if self.proc.returncode not in (0, -signal.SIGINT):
            raise PerfFailed(f"perf record failed: {err.decode(errors='replace').strip()}")
        report = subprocess.run(
            ["perf", "report", "-i", self.path, "--sort", "pid,dso", "--stdio", "-q",
             "--no-children"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return parse(report.stdout.splitlines())

    def abort(self) -> None:
        """The run failed: perf goes, unreported (nothing if ``stop`` ended it already)."""
        self._deaf()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()

    def _deaf(self) -> None:
        if self._listening:
            self._listening = False
            os.close(self._ack)

    def _command(self, word: str) -> None:
        """Say ``word`` on perf's control FIFO and wait for its ack."""
        deadline = time.monotonic() + START_S
        while True:
            try:
                ctl = os.open(self._ctl, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as err:  # ENXIO: perf has not opened its end yet
                if err.errno != errno.ENXIO or self._gone(deadline):
                    raise PerfFailed(f"perf record did not start ({self._why()})") from None
                time.sleep(0.01)
        try:
            os.write(ctl, f"{word}\n".encode())
        finally:
            os.close(ctl)
        while not select.select([self._ack], [], [], 0.05)[0]:
            if self._gone(deadline):
                raise PerfFailed(f"perf record did not answer {word!r} ({self._why()})")
        os.read(self._ack, 64)

    def _gone(self, deadline: float) -> bool:
        return self.proc.poll() is not None or time.monotonic() > deadline

    def _why(self) -> str:
        """perf's own words, once it has exited (else that it is still silent)."""
        if self.proc.poll() is None:
            return f"no answer in {START_S:g} s"
        assert self.proc.stderr is not None
        said = self.proc.stderr.read().decode(errors="replace").strip()
        return f"exit {self.proc.returncode}" + (f": {said}" if said else "")
