"""Before and after in one run: ``fabricctl bench`` rows of another revision beside this
checkout's, interleaved round by round (this VM's speed drifts by more than most changes over
minutes, so a comparison across minutes says little).

    python -m bench.ab REV [--after REV2] [--rounds 3] [--row "ARGS"]...
        [--before-env NAME=VALUE]... [--after-env NAME=VALUE]...

REV (and REV2, when given in place of this checkout) is checked out into a temporary worktree
and runs its own daemons and its own bench (``tools.ctl``, or ``client.ctl`` in trees from
before the tools package); this checkout runs its own. ``--before-env`` and ``--after-env`` set
variables for one side's runs (its bench and the daemons it starts): ``python -m bench.ab HEAD
--before-env DATFABRIC_SCHED=normal`` compares a setting rather than code. Each row prints both
sides' medians and ranges and their ratio (after / before: above 1 is better for rates, below 1
for latencies). Both sides warm up alike: a revision whose bench predates ``--warmup`` warms up
50 operations, and the other side's rows are then given ``--warmup 50`` too.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
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


OLD_WARMUP = "50"  # operations fabricctl bench ran untimed before it had --warmup


def has_warmup(tree: Path) -> bool:
    """Does ``tree``'s fabricctl bench take ``--warmup``?"""
    ctl = tree / "tools" / "ctl.py"
    return ctl.exists() and '"--warmup"' in ctl.read_text()


def warm_alike(trees: Sequence[Path], args: str) -> list[str]:
    """Each tree's arguments for a row: as given, but when one tree's bench predates
    ``--warmup``, the others warm up as it does."""
    if "--warmup" in args.split() or all(map(has_warmup, trees)):
        return [args] * len(trees)
    return [f"{args} --warmup {OLD_WARMUP}" if has_warmup(t) else args for t in trees]


def figure(tree: Path, args: str, env: Mapping[str, str]) -> float:
    """One ``fabricctl bench`` row run by ``tree``'s code with ``env`` set: its median latency
    (us), its message rate (operations/s, for 4 KiB or less) or its bandwidth (MB/s)."""
    row = bench(*args.split(), tree=tree, env=env)
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


def compare(
    sides: tuple[tuple[Path, Mapping[str, str]], tuple[Path, Mapping[str, str]]],
    rows: list[str],
    rounds: int,
) -> list[str]:
    """The table's lines: each row ``rounds`` times, before then after each round (a side is
    a tree and the variables its runs get)."""
    width = max([52, *(len(args) + 1 for args in rows)])  # a row's arguments, then a space
    table: list[tuple[str, str, str, float]] = []
    for args in rows:
        runs: tuple[list[float], list[float]] = ([], [])
        each = warm_alike([tree for tree, _ in sides], args)
        for _ in range(rounds):
            for (tree, env), side_args, values in zip(sides, each, runs, strict=True):
                values.append(figure(tree, side_args, env))
        before, after = (
            f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"
            for values in runs
        )
        table.append((args, before, after, statistics.median(runs[1]) / statistics.median(runs[0])))
    cell = max([22, *(len(c) + 2 for _, *cells, _ in table for c in cells)])  # two spaces apart
    out = [f"{'row':<{width}}{'before':>{cell}}{'after':>{cell}}{'after/before':>14}"]
    for args, before, after, ratio in table:
        out.append(f"{args:<{width}}{before:>{cell}}{after:>{cell}}{ratio:>14.2f}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab")
    parser.add_argument("rev", help="the revision to compare this checkout with (before)")
    parser.add_argument("--after", help="a revision to run in place of this checkout")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs per row")
    parser.add_argument("--row", action="append", help="fabricctl bench ARGS (repeatable)")
    for side in ("before", "after"):
        parser.add_argument(f"--{side}-env", action="append", default=[], metavar="NAME=VALUE",
                            help=f"a variable for the {side} side's runs (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    rows = args.row or list(ROWS)
    envs = []
    for side, pairs in (("before", args.before_env), ("after", args.after_env)):
        if any("=" not in pair for pair in pairs):
            parser.error(f"--{side}-env takes NAME=VALUE")
        envs.append(dict(pair.split("=", 1) for pair in pairs))
    with contextlib.ExitStack() as trees:
        before = trees.enter_context(worktree(args.rev))
        after = trees.enter_context(worktree(args.after)) if args.after else HERE
        shown = ["".join(f" {k}={v}" for k, v in env.items()) for env in envs]
        print(f"# before: {args.rev} ({before}){shown[0]};"
              f" after: {args.after or 'this checkout'} ({after}){shown[1]};"
              f" medians (range) of {args.rounds} interleaved runs; latency in us,"
              " rates of 4 KiB or less in operations/s, others in MB/s", flush=True)  # fmt: skip
        for line in compare(((before, envs[0]), (after, envs[1])), rows, args.rounds):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
