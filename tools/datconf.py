"""``fabricctl dat-conf``: the dat.conf lines that let C DAT programs use a node.

libdat2 picks a provider by IA name, DAT version and thread safety, the last taken from how the
program was compiled (DAT_THREADSAFE, by default false). libdatfabric is thread safe, so each node
gets two lines of one IA name, ``threadsafe`` and ``nonthreadsafe``; the line's ia_params field
is the node's consumer socket.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "provider" / "build" / "libdatfabric.so"
"""Where ``make provider`` builds the library."""


def lines(ia_name: str, socket: str, library: str | os.PathLike[str] = LIBRARY) -> str:
    """The dat.conf lines naming ``ia_name`` for the node whose consumer socket is ``socket``."""
    if not ia_name or any(c.isspace() or c == '"' for c in ia_name):
        raise ValueError(f"an IA name is one word: {ia_name!r}")
    if any(c.isspace() or c == '"' for c in socket):
        raise ValueError(f"the socket path may hold no space or quote: {socket!r}")
    lib = os.path.abspath(library)
    return "".join(
        f'{ia_name} u2.0 {kind} default {lib} dfabric.2.0 "{socket}" ""\n'
        for kind in ("threadsafe", "nonthreadsafe")
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``dat-conf`` subcommand."""
    p = sub.add_parser(
        "dat-conf",
        allow_abbrev=False,
        help="print (or write) the dat.conf lines for a node, for C DAT programs",
    )
    p.add_argument("--socket", default="/tmp/datfabric/fabricd.sock", help="the node's socket")
    p.add_argument("--name", default="datfabric", help="the IA name programs open")
    p.add_argument("--library", default=str(LIBRARY), help="path of libdatfabric.so")
    p.add_argument("--output", default="", help="append to this file instead of printing")


def main(args: argparse.Namespace) -> int:
    """Print or append the lines; DAT_OVERRIDE=<file> makes libdat2 read that file."""
    text = lines(args.name, os.path.abspath(args.socket), args.library)
    if not Path(args.library).exists():
        print(f"note: {args.library} is not built yet (make provider)", file=sys.stderr)
    if args.output:
        with open(args.output, "a", encoding="utf-8") as f:
            f.write(text)
    else:
        print(text, end="")
    return 0
