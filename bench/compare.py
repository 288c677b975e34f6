"""Our fabric next to UCX over TCP on this machine, one table.

``python -m bench.compare [--sizes 4096,65536,1048576] [--iters N] [--window 16] [--rounds N]
[--warmup N] [--json]``

At each size it runs ``fabricctl bench`` (write, send and read bw at ``--window``; write lat at
window 1; its Sends, into receives its target reposts, are compared with ucp_put_bw),
the C driver's write and send bw at ``--window`` (provider/bench/post_reap through
libdatfabric: a C program beside a C program, as users of the provider run; its Sends are
compared with ucp_put_bw too; over C_ITERS operations at least, C_BYTES at most)
and ``ucx_perftest`` over TCP on loopback (``ucp_put_bw``, ``ucp_get``, ``ucp_put_lat``), each
client against its own server, every process under a timeout. A run that fails shows ``n/a``
and says why on stderr. Every run warms up first, untimed: ``--warmup`` operations (default
--iters, at most ucx_perftest's own default of 10,000), ucx_perftest's as its ``-w`` and ours
as fabricctl bench's ``--warmup``; the C driver's, a tenth of its run (post_reap).

``--rounds N`` measures everything N times, round by round (every size in a round, then the
next round), and ends with each size's medians: each ratio there is the median of the rounds'
own ratios, ours and UCX's having run side by side in one round, and a comment line lists
those ratios round by round. On a machine whose speed drifts, and UCX's figures more than
ours, one round's ratio says little.

Units: MB = 10^6 bytes everywhere (ucx_perftest's MB = 2^20 is converted). Our latency is the
median post-to-completion time at window 1, i.e. a full round trip; ucx ``put_lat`` is the
median of half a round trip (ping-pong / 2), so it is printed as UCX reports it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import cdriver
from bench.compare_table import COLUMNS, Row, format_line, medians, ratios_line
from bench.limits import PACE_LOOP, pace
from bench.nodes import add_daemon_cpus
from bench.perftest import at_least_zero, moderation, warmup
from bench.ucx import RunError, run_ucx

DEFAULT_SIZES = (4096, 65536, 1048576)
DEFAULT_ITERS = 1000  # perftest's default; about 20 s for the default sizes here
RUN_TIMEOUT = 30.0  # seconds for any one command
BUDGET = 180.0  # seconds for the whole comparison; later runs are skipped past it
BW_WINDOW = 16
C_ITERS = 100_000
"""post_reap's runs are this long at least: its first tens of ms move most (64 B Writes, three
interleaved rounds: 137k-225k/s over 20,000, 217k-237k/s over 100,000; ucx_perftest's put_bw
~300k/s over either, in the rounds where it ran at its usual speed); and at most C_BYTES."""
C_BYTES = 1 << 29
LAT_WINDOW = 1

LEGEND = (
    "# MB = 10^6 B (ucx_perftest's 2^20-byte MB converted); ratio = ours / ucx",
    "# ours: fabricctl bench, two fabricd nodes on loopback; bw at window {window}, one "
    "request in {cq_mod} signalled (send: into receives its target reposts); "
    "write lat = median post-to-completion at window 1 (a FULL round trip); ours C: "
    "provider/bench/post_reap, a C program writing (sending, into receives it reposts) through "
    "libdatfabric (polling, as ucx_perftest does) at the same window, over --iters "
    "operations or {c_ops}, whichever is more (at most {c_mib} MiB); every run warms up "
    "first, untimed: {warm} operations (ucx_perftest -w, ours --warmup; ours C a tenth of "
    "its run)",
    "# ucx: ucx_perftest UCX_TLS=tcp UCX_NET_DEVICES=lo, 'overall' bandwidth; ucp_get is "
    "emulated over active messages on tcp; put_lat = median of HALF a round trip (RTT/2)",
)


def _run_group(argv: list[str], timeout: float, what: str) -> tuple[int, str, str]:
    """Run ``argv`` in its own process group; on timeout end the whole group (its daemons)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the group: this child and its own
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=2)
        raise RunError(f"{what} timed out after {timeout:.0f} s") from e
    return proc.returncode, out, err.strip()


class Ours:
    """Runs ``fabricctl bench`` (as ``python -m tools.ctl bench``) and remembers if it can't."""

    def __init__(
        self,
        window: int = BW_WINDOW,
        cq_mod: int = 1,
        warm: int = 0,
        cpus: tuple[str, str] = ("", ""),
    ) -> None:
        self.window = window  # of the bandwidth runs
        self.cq_mod = cq_mod  # of the bandwidth runs: one request in cq_mod signalled
        self.warm = warm  # operations each run does untimed first
        self.cpus = cpus  # the daemons' CPU lists (fabricctl bench --daemon-cpus), Python and C
        self.no_limits = True  # skip its limit measurement when it offers that
        self.broken: str | None = None  # set when every further run would fail the same way

    def run(self, op: str, mode: str, size: int, iters: int, timeout: float) -> dict[str, Any]:
        """One run; the JSON object for (op, mode, size)."""
        if self.broken:
            raise RunError("skipped: fabricctl bench is unavailable (see above)")
        window = self.window if mode == "bw" else LAT_WINDOW
        argv = [
            sys.executable,
            "-m",
            "tools.ctl",
            "bench",
            "--op",
            op,
            "--mode",
            mode,
            "--size",
            str(size),
            "--iters",
            str(iters),
            "--window",
            str(window),
            "--warmup",
            str(self.warm),
            "--json",
            *(["--cq-mod", str(self.cq_mod)] if mode == "bw" and self.cq_mod > 1 else []),
            *(["--daemon-cpus", ":".join(self.cpus)] if any(self.cpus) else []),
        ]
        what = f"fabricctl bench {op} {mode} {size} B"
        while True:
            rc, out, err = _run_group(
                argv + (["--no-limits"] if self.no_limits else []), timeout, what
            )
            if rc == 2 and self.no_limits and "--no-limits" in err:
                self.no_limits = False
                continue
            break
        if rc == 2 and ("invalid choice" in err or "unrecognized" in err):
            self.broken = f"fabricctl bench unavailable: {err.splitlines()[-1]}"
            raise RunError(self.broken)
        if rc != 0:
            raise RunError(f"{what} exit {rc}: {' | '.join(err.splitlines()[-3:])}")
        for line in reversed(out.splitlines()):
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict) and obj.get("size", size) == size:
                    return obj
        raise RunError(f"fabricctl bench {op} {mode} {size} B printed no JSON result")


def _num(obj: dict[str, Any] | None, key: str) -> float | None:
    value = obj.get(key) if obj else None
    return float(value) if isinstance(value, int | float) else None


def compare_size(size: int, iters: int, ours: Ours, deadline: float) -> Row:
    """Run the nine measurements at one size; failures leave None and go to stderr."""
    row = Row(size, iters)
    c_iters = max(iters, min(C_ITERS, C_BYTES // size))

    def attempt(what: str, fn: Callable[[float], float | None]) -> float | None:
        left = deadline - time.monotonic()
        try:
            if left <= 1.0:
                raise RunError("time budget used up")
            return fn(min(RUN_TIMEOUT, left))
        except (RunError, cdriver.Unavailable, OSError, subprocess.SubprocessError) as e:
            print(f"compare: {what} at {size} B: {e}", file=sys.stderr)
            return None

    row.ours_write_MBps = attempt(
        "ours write bw", lambda t: _num(ours.run("write", "bw", size, iters, t), "bw_MBps")
    )
    row.ucx_put_bw_MBps = attempt(
        "ucx ucp_put_bw", lambda t: run_ucx("ucp_put_bw", size, iters, t, ours.warm).bw_MBps
    )

    def c_bw(op: str) -> Callable[[float], float]:
        """The C driver's bandwidth run of ``op`` at this size, in MB/s."""
        return lambda t: (
            cdriver.rate(size, ours.window, c_iters, t, op, ours.cq_mod, ours.cpus) * size / 1e6
        )

    row.ours_c_write_MBps = attempt("ours C write bw", c_bw("write"))
    row.ours_c_send_MBps = attempt("ours C send bw", c_bw("send"))
    row.ours_send_MBps = attempt(
        "ours send bw", lambda t: _num(ours.run("send", "bw", size, iters, t), "bw_MBps")
    )
    row.ours_read_MBps = attempt(
        "ours read bw", lambda t: _num(ours.run("read", "bw", size, iters, t), "bw_MBps")
    )
    row.ucx_get_MBps = attempt(
        "ucx ucp_get", lambda t: run_ucx("ucp_get", size, iters, t, ours.warm).bw_MBps
    )
    row.ours_write_lat_us_p50 = attempt(
        "ours write lat", lambda t: _num(ours.run("write", "lat", size, iters, t), "lat_us_p50")
    )
    row.ucx_put_lat_us_p50 = attempt(
        "ucx ucp_put_lat", lambda t: run_ucx("ucp_put_lat", size, iters, t, ours.warm).lat_p50_us
    )
    return row


def _nproc() -> int:
    """What ``nproc`` prints: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a list of byte counts: {text!r}") from e
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description="fabricctl bench next to ucx_perftest over TCP, at each size",
        allow_abbrev=False,
    )
    p.add_argument(
        "--sizes",
        type=_sizes,
        default=list(DEFAULT_SIZES),
        help="comma-separated bytes (default 4096,65536,1048576)",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=DEFAULT_ITERS,
        help=f"iterations of every run (default {DEFAULT_ITERS})",
    )
    p.add_argument(
        "--window",
        type=int,
        default=BW_WINDOW,
        help=f"operations in flight in our bandwidth runs (default {BW_WINDOW})",
    )
    p.add_argument(
        "--cq-mod",
        type=int,
        default=1,
        metavar="N",
        help="our bandwidth runs (Python and C) signal one request in N (perftest's CQ"
        " moderation; ucx_perftest's put_bw has no completion per message); default 1",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure everything N times, round by round, then print each size's medians",
    )
    p.add_argument(
        "--warmup",
        type=at_least_zero,
        default=None,
        metavar="N",
        help="operations every run does untimed first (ucx_perftest -w, fabricctl bench"
        " --warmup); default --iters, at most ucx_perftest's default 10000",
    )
    add_daemon_cpus(p, "the daemons of our runs, Python's and the C driver's")
    p.add_argument("--json", action="store_true", help="one JSON object per size instead")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print it; 0 if every cell was measured, 1 otherwise."""
    args = build_parser().parse_args(argv)
    if min(args.iters, args.window, args.rounds, args.cq_mod) <= 0:
        print("compare: --iters, --window, --rounds and --cq-mod must be positive", file=sys.stderr)
        return 2
    deadline = time.monotonic() + BUDGET * args.rounds
    ours = Ours(args.window, args.cq_mod, warmup(args.iters, args.warmup), args.daemon_cpus)
    if not args.json:
        now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        rounds = f"  rounds {args.rounds}" if args.rounds > 1 else ""
        print(
            f"# {now}  {platform.machine()}  nproc {_nproc()}  iters {args.iters}{rounds}"
            f"  pace {pace() / 1e3:.1f} ms ({PACE_LOOP:,} additions in a Python loop, CPU time)"
        )
        legend = "\n".join(LEGEND)
        print(
            legend.format(
                window=args.window,
                cq_mod=moderation(args.cq_mod, args.window),
                c_ops=f"{C_ITERS:,}",
                c_mib=C_BYTES >> 20,
                warm=f"{ours.warm:,}",
            )
        )
        print(format_line([name for name, _ in COLUMNS]), flush=True)
    rows: dict[int, list[Row]] = {size: [] for size in args.sizes}
    for k in range(1, args.rounds + 1):
        if args.rounds > 1 and not args.json:
            print(f"# round {k} of {args.rounds}  pace {pace() / 1e3:.1f} ms", flush=True)
        for size in args.sizes:
            row = compare_size(size, args.iters, ours, deadline)
            row.round = k if args.rounds > 1 else 0
            rows[size].append(row)
            _show(row, args.json)
    if args.rounds > 1:
        if not args.json:
            print(f"# the median of {args.rounds} rounds; each ratio the median of the rounds'"
                  " own ratios")  # fmt: skip
        for size in args.sizes:
            _show(medians(rows[size]), args.json)
        if not args.json:
            for size in args.sizes:
                print(ratios_line(medians(rows[size])))
    complete = all(None not in row.to_json().values() for kept in rows.values() for row in kept)
    return 0 if complete else 1


def _show(row: Row, as_json: bool) -> None:
    print(json.dumps(row.to_json()) if as_json else format_line(row.cells()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
