"""perftest's output for ``fabricctl bench``: one run's result, the header block and the table
rows, and the CQ moderation a run uses."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from typing import Any

LINE = "-" * 87
WARMUP = 10_000
"""ucx_perftest's default warm-up (its ``-w``): operations run untimed before it measures."""


def warmup(iters: int, asked: int | None = None) -> int:
    """Operations a run does untimed before it measures: ``asked`` (``--warmup``), else as
    many as it measures, at most WARMUP, so a figure is the warm fabric's, as ucx_perftest's
    is. A fresh fabric's first few thousand operations are slower: 4 KiB Writes at window 64,
    one in 16 signalled, ran at 547-600 MB/s over their first 1,000 and 785-827 over their
    first 10,000, ~900-950 after (three runs each); `fabricctl bench --size 4096 --window 64
    --iters 20000 --cq-mod 16`, four interleaved pairs: 527-853 MB/s after 50 operations
    untimed (this tool's warm-up until then), 858-961 after 10,000."""
    return asked if asked is not None else min(iters, WARMUP)


def moderation(cq_mod: int, depth: int) -> int:
    """The CQ moderation of a run with ``depth`` requests in flight: one request in ``cq_mod``
    signalled, at most one in ``depth`` (a window with no signalled request never retires)."""
    return max(1, min(cq_mod, depth))


@dataclass
class Result:
    """One row: what was run and what it achieved."""

    op: str
    mode: str
    size: int
    iters: int
    window: int
    same_node: bool
    poll: bool = False  # completions taken by dequeue in a loop, not waited for
    cq_mod: int = 1  # one operation in cq_mod signalled (perftest's CQ moderation)
    warmup: int = 0  # operations run untimed first
    daemon_cpus: tuple[str, str] = ("", "")  # the daemons' CPU lists ("": unpinned)
    bw_MBps: float = 0.0
    bw_peak_MBps: float = 0.0
    msg_rate: float = 0.0  # Mpps
    lat_us: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        """The q-quantile of the latencies (0 when none were taken)."""
        if not self.lat_us:
            return 0.0
        ordered = sorted(self.lat_us)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def to_json(self, limits: dict[str, float]) -> dict[str, Any]:
        """The --json object (MB = 10^6 bytes; lat_us_* are post-to-completion, window 1)."""
        out: dict[str, Any] = {
            "op": self.op,
            "mode": self.mode,
            "size": self.size,
            "iters": self.iters,
            "window": self.window,
            "same_node": self.same_node,
            "poll": self.poll,
            "cq_mod": self.cq_mod,
            "warmup": self.warmup,
            "daemon_cpus": list(self.daemon_cpus),
            "bw_MBps": round(self.bw_MBps, 3),
            "msg_rate": round(self.msg_rate, 6),
            "lat_us_p50": round(statistics.median(self.lat_us), 3) if self.lat_us else None,
            "lat_us_p99": round(self.percentile(0.99), 3) if self.lat_us else None,
        }
        out.update(limits)
        out["ratio"] = self.ratio(limits)
        return out

    def ratio(self, limits: dict[str, float]) -> float | None:
        """Against the matching machine limit: stream for large, pipelined rate for small."""
        if self.mode == "lat" and self.lat_us and limits.get("limit_rr_rtt_us"):
            return round(statistics.median(self.lat_us) / limits["limit_rr_rtt_us"], 3)
        if self.mode == "bw" and self.size >= 65536 and limits.get("limit_tcp_stream_MBps"):
            return round(self.bw_MBps / limits["limit_tcp_stream_MBps"], 3)
        if self.mode == "bw" and limits.get("limit_rr_pipelined_per_s"):
            return round(self.msg_rate * 1e6 / limits["limit_rr_pipelined_per_s"], 3)
        return None


def peak(size: int, finished: list[float]) -> float:
    """The best bandwidth over any tenth of the run (MB/s), as perftest's BW peak."""
    times = sorted(finished)
    span = max(1, len(times) // 10)
    best = 0.0
    for i in range(span, len(times)):
        dt = times[i] - times[i - span]
        if dt > 0:
            best = max(best, size * span / dt / 1e6)
    return best


TITLES = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send"}


def header(
    op: str,
    mode: str,
    window: int,
    same_node: bool,
    limits: dict[str, float],
    cq_mod: int = 1,
    warm: int | None = None,
    cpus: tuple[str, str] = ("", ""),
) -> str:
    """perftest's header block, with the machine limits measured in this run (and where the
    daemons run, when ``cpus`` pins them)."""
    kind = "BW" if mode == "bw" else "Latency"
    depth = window if mode == "bw" else 1
    lines = [
        LINE,
        f"{'':20}{TITLES[op]} {kind} Test",
        " Device          : datfabric          Transport type : TCP (fabricd)",
        " Number of qps   : 1                  Connection type : RC",
        f" TX depth        : {depth:<18} Same node       : {'yes' if same_node else 'no'}",
        f" CQ Moderation   : {moderation(cq_mod, depth)}",
        f" Warm-up         : {warm if warm is not None else f'the iterations, at most {WARMUP}'}",
    ]
    if any(cpus):
        at = [f"CPUs {c}" if c else "unpinned" for c in cpus]
        pinned = f"the one, {at[0]}" if same_node else f"initiator's {at[0]}, target's {at[1]}"
        lines.append(f" Daemons         : {pinned}")
    if limits:
        lines.append(
            f" Limits (this run): TCP stream {limits['limit_tcp_stream_MBps']:.0f} MB/s, "
            f"request-reply RTT {limits['limit_rr_rtt_us']:.1f} us, pipelined "
            f"{limits['limit_rr_pipelined_per_s'] / 1e3:.0f} k/s"
        )
    if mode == "lat":
        lines.append(" Latency: post to completion at the initiator, full round trip, µs")
    lines.append(LINE)
    if mode == "bw":
        lines.append(
            f" {'#bytes':<10} {'#iterations':<14} {'BW peak[MB/sec]':<19} "
            f"{'BW average[MB/sec]':<21} {'MsgRate[Mpps]':<15} ratio"
        )
    else:
        lines.append(
            f" {'#bytes':<8} {'#iterations':<12} {'t_min[usec]':<13} "
            f"{'t_max[usec]':<13} {'t_typical[usec]':<16} {'t_avg[usec]':<13} "
            f"{'99% [usec]':<12} {'99.9% [usec]':<13} ratio"
        )
    return "\n".join(lines)


def row(result: Result, limits: dict[str, float]) -> str:
    """One table line."""
    ratio = result.ratio(limits)
    r = f"{ratio:.2f}" if ratio is not None else "-"
    if result.mode == "bw":
        return (
            f" {result.size:<10} {result.iters:<14} {result.bw_peak_MBps:<19.2f} "
            f"{result.bw_MBps:<21.2f} {result.msg_rate:<15.6f} {r}"
        )
    lat = result.lat_us
    return (
        f" {result.size:<8} {result.iters:<12} {min(lat):<13.2f} {max(lat):<13.2f} "
        f"{statistics.median(lat):<16.2f} {statistics.fmean(lat):<13.2f} "
        f"{result.percentile(0.99):<12.2f} {result.percentile(0.999):<13.2f} {r}"
    )


def at_least_one(text: str) -> int:
    """An argparse type for counts such as ``--cq-mod``: a whole number of 1 or more."""
    return _at_least(text, 1)


def at_least_zero(text: str) -> int:
    """An argparse type for counts such as ``--warmup``: a whole number of 0 or more."""
    return _at_least(text, 0)


def _at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of {least} or more")
    return value
