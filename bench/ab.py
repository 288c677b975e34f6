"""Before and after in one run: ``fabricctl bench`` rows of another revision beside this
checkout's, interleaved round by round (this VM's speed drifts by more than most changes over
minutes, so a comparison across minutes says little).

    python -m bench.ab REV [--after REV2] [--rounds 3] [--row "ARGS"]...

REV (and REV2, when given in place of this checkout) is checked out into a temporary worktree
and runs its own daemons and its own bench (``tools.ctl``, or ``client.ctl`` in trees from
before the tools package); this checkout runs its own. Each row prints both sides' medians and
ranges and their ratio (after / before: above 1 is better for rates, below 1 for latencies).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.report import bench

HERE = Path(__file__).resolve().parent.parent
ROWS = (
    "--op write --mode lat --size 64 --iters 2000",
    "--op read --mode lat --size 64 --iters 2000",
    "--op write --size 64 --window 64 --iters 30000",
    "--op send --size 64 --window 64 --iters 20000",
    "--op write --size 1048576 --window 16 --iters 600",
    "--op read --size 1048576 --window 16 --iters 600",
    "--op send --size 1048576 --window 16 --iters 600",
)


def figure(tree: Path, args: str) -> float:
    """One ``fabricctl bench`` row run by ``tree``'s code: its median latency (us), its message
    rate (operations/s, for 4 KiB or less) or its bandwidth (MB/s)."""
    row = bench(*args.split(), tree=tree)
    if row["mode"] == "lat":
        return float(row["lat_us_p50"])
    if row["size"] <= 4096:
        return float(row["msg_rate"]) * 1e6
    return float(row["bw_MBps"])


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """``rev`` checked out beside this checkout, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="datfabric-ab-") as tmp:
        path = Path(tmp) / "tree"
        git = ["git", "-C", str(HERE)]
        subprocess.run([*git, "worktree", "add", "--detach", str(path), rev],
                       check=True, capture_output=True, text=True)  # fmt: skip
        try:
            if (path / "setup.py").exists():  # its own C part, not this checkout's
                subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                               cwd=path, check=True, capture_output=True)  # fmt: skip
            yield path
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(path)],
                           check=False, capture_output=True)  # fmt: skip


def compare(before: Path, after: Path, rows: list[str], rounds: int) -> list[str]:
    """The table's lines: each row ``rounds`` times, before then after each round."""
    out = [f"{'row':<52}{'before':>22}{'after':>22}{'after/before':>14}"]
    for args in rows:
        runs: dict[Path, list[float]] = {before: [], after: []}
        for _ in range(rounds):
            for tree in (before, after):
                runs[tree].append(figure(tree, args))
        cells = []
        for tree in (before, after):
            values = runs[tree]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})")
        ratio = statistics.median(runs[after]) / statistics.median(runs[before])
        out.append(f"{args:<52}{cells[0]:>22}{cells[1]:>22}{ratio:>14.2f}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab")
    parser.add_argument("rev", help="the revision to compare this checkout with (before)")
    parser.add_argument("--after", help="a revision to run in place of this checkout")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs per row")
    parser.add_argument("--row", action="append", help="fabricctl bench ARGS (repeatable)")
    args = parser.parse_args(argv)
    rows = args.row or list(ROWS)
    with contextlib.ExitStack() as trees:
        before = trees.enter_context(worktree(args.rev))
        after = trees.enter_context(worktree(args.after)) if args.after else HERE
        print(f"# before: {args.rev} ({before}); after: {args.after or 'this checkout'}"
              f" ({after}); medians (range) of {args.rounds} interleaved runs; latency in us,"
              " rates of 4 KiB or less in operations/s, others in MB/s", flush=True)  # fmt: skip
        for line in compare(before, after, rows, args.rounds):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
