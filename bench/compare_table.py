"""bench.compare's table: one row per size (ours beside UCX's), the ratios between them,
the medians of several rounds, and the text columns."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

COLUMNS = (
    ("size", 8),
    ("ours write MB/s", 15),
    ("ucx put_bw MB/s", 15),
    ("ratio", 6),
    ("ours send MB/s", 14),
    ("ratio", 6),
    ("ours C write MB/s", 17),
    ("ratio", 6),
    ("ours C send MB/s", 16),
    ("ratio", 6),
    ("ours read MB/s", 14),
    ("ucx get MB/s", 12),
    ("ratio", 6),
    ("ours write lat p50 us", 21),
    ("ucx put_lat us", 14),
)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


RATIOS = {  # a ratio's name: (our figure, UCX's figure), fields of Row
    "write_ratio": ("ours_write_MBps", "ucx_put_bw_MBps"),
    "send_ratio": ("ours_send_MBps", "ucx_put_bw_MBps"),
    "c_write_ratio": ("ours_c_write_MBps", "ucx_put_bw_MBps"),
    "c_send_ratio": ("ours_c_send_MBps", "ucx_put_bw_MBps"),
    "read_ratio": ("ours_read_MBps", "ucx_get_MBps"),
}


@dataclass
class Row:
    """One size: our six figures and UCX's three (one round's, or the rounds' medians)."""

    size: int
    iters: int
    ours_write_MBps: float | None = None
    ucx_put_bw_MBps: float | None = None
    ours_send_MBps: float | None = None  # the Python client's Sends
    ours_c_write_MBps: float | None = None  # the C driver (provider/bench/post_reap)
    ours_c_send_MBps: float | None = None
    ours_read_MBps: float | None = None
    ucx_get_MBps: float | None = None
    ours_write_lat_us_p50: float | None = None  # full round trip
    ucx_put_lat_us_p50: float | None = None  # half round trip
    round: int = 0  # which round (1, 2, ...) of a --rounds run; 0: a single run
    median_of: list[Row] | None = None  # the rounds whose medians these are

    def ratio(self, name: str) -> float | None:
        """One of RATIOS: ours / UCX's; for medians, the median of the rounds' own ratios."""
        if self.median_of is not None:
            return _median([row.ratio(name) for row in self.median_of])
        ours, ucx = RATIOS[name]
        return _ratio(getattr(self, ours), getattr(self, ucx))

    def to_json(self) -> dict[str, Any]:
        """The --json line (MB = 10^6 B; ucx put_lat is RTT/2, ours is a full RTT)."""

        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 3)

        out: dict[str, Any] = {"size": self.size, "iters": self.iters}
        if self.round:
            out["round"] = self.round
        if self.median_of is not None:
            out["median_of"] = len(self.median_of)
        out.update({name: r(getattr(self, name)) for name in FIGURES})
        out.update({name: r(self.ratio(name)) for name in RATIOS})
        return out

    def cells(self) -> list[str]:
        """The table cells, ``n/a`` where a run failed."""

        def f(x: float | None, spec: str) -> str:
            return "n/a" if x is None else format(x, spec)

        return [
            str(self.size),
            f(self.ours_write_MBps, ".1f"),
            f(self.ucx_put_bw_MBps, ".1f"),
            f(self.ratio("write_ratio"), ".2f"),
            f(self.ours_send_MBps, ".1f"),
            f(self.ratio("send_ratio"), ".2f"),
            f(self.ours_c_write_MBps, ".1f"),
            f(self.ratio("c_write_ratio"), ".2f"),
            f(self.ours_c_send_MBps, ".1f"),
            f(self.ratio("c_send_ratio"), ".2f"),
            f(self.ours_read_MBps, ".1f"),
            f(self.ucx_get_MBps, ".1f"),
            f(self.ratio("read_ratio"), ".2f"),
            f(self.ours_write_lat_us_p50, ".1f"),
            f(self.ucx_put_lat_us_p50, ".2f"),
        ]


FIGURES = [f.name for f in fields(Row) if f.name.startswith(("ours_", "ucx_"))]


def _median(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


def medians(rows: list[Row]) -> Row:
    """One size's rounds summed up: each figure's median over the rounds that measured it."""
    row = Row(rows[0].size, rows[0].iters, median_of=rows)
    for name in FIGURES:
        setattr(row, name, _median([getattr(r, name) for r in rows]))
    return row


def ratios_line(row: Row) -> str:
    """A comment line: each ratio of the rounds behind ``row``, round by round."""
    rounds = row.median_of or [row]

    def each(name: str) -> str:
        return " ".join("n/a" if (x := r.ratio(name)) is None else f"{x:.2f}" for r in rounds)

    names = {"write_ratio": "write", "send_ratio": "send", "c_write_ratio": "C write"}
    names |= {"c_send_ratio": "C send", "read_ratio": "read"}
    listed = "; ".join(f"{label} {each(name)}" for name, label in names.items())
    return f"# {row.size} B, the ratio of each round: {listed}"


def format_line(cells: list[str]) -> str:
    """Right-aligned columns, two spaces apart."""
    return "  ".join(c.rjust(w) for c, (_, w) in zip(cells, COLUMNS, strict=True))
