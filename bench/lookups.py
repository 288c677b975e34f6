"""What the compiled data path still looks up at run time, read from the C that mypyc generated
for it (``build/__native_*.c``, written as the project installs: README, "Native modules").

    python -m bench.lookups [--source FILE] [FUNCTION...]

For each compiled function (mypyc's name for it: ``initiator___Initiator___retire``, the
module, the class and the function; by default ``PATH``, a window-1 Write's and Read's steps)
it prints the names read from a module's dictionary (a module-level name that is not
``Final``, a class, an enum or a module), the attributes read generically (an enum member, a
C extension's function, a method of an object mypyc does not compile) and the methods called
generically. A module's dictionary is a hash look-up at each use; a ``Final`` is a C static or
a number (docs/performance.md, "thirty-third session": ~40 of them on a Write's path cost
~3 us of its round trip).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

from proto.native import ROOT

PATH = (
    "streams____Stream___buffer_updated", "streams___PeerStream____answered",
    "streams____Stream___send", "streams____Stream____flush", "streams____Stream____write",
    "turn___Turn____run", "turn___Turn___cork",
    "lane___answer", "lane___land", "lane___take_acks", "lane___acks", "lane____oldest_read",
    "target___Target___batch_end", "responder___Responder___serve",
    "initiator___Initiator___ack", "initiator___Initiator___retire",
    "initiator___Initiator___transmit", "initiator___Initiator___post_plain",
    "initiator___Initiator____lone_read", "runs___lone", "wire___Wire___send",
    "answers___Answers___landed", "intake___Intake___emptying", "intake___Intake___retired",
    "intake___Intake___drain", "intake___Intake____requests", "queues___retired",
    "queues___set_polling", "nic___events___Events___rows_done", "cork___corked",
)  # fmt: skip
"""The compiled functions a window-1 64 B Write or Read runs in either daemon, each time."""
LEFT: dict[str, frozenset[str]] = {
    "responder___Responder___serve": frozenset({"lanes"}),  # its C lane through its module:
    # tests/core/test_lone_read.py counts the calls by patching it there
    "turn___Turn____run": frozenset({"log"}),  # only when deferred work raised
}
"""The dictionary look-ups PATH keeps on purpose (tests/unit/test_bench_lookups.py: no other)."""

_FUNCTION = re.compile(r"\n\S[^\n]*\bCPyDef_(\w+)\([^;{]*\)\s*\{")
_NAME = r"CPyStatics\[\d+\]; /\* '([^']*)' \*/\s*\n\s*cpy_r_\w+ = "
_READS = re.compile(_NAME + r"(CPyDict_GetItem|CPyObject_GetAttr)\b")
_STATIC = re.compile(r"cpy_r_(\w+) = CPyStatics\[\d+\]; /\* '([^']*)' \*/")
_METHOD = re.compile(r"PyObject_VectorcallMethod\(cpy_r_(\w+),")


@dataclass
class Lookups:
    """What one compiled function looks up at run time, in the order of its C."""

    dictionary: list[str] = field(default_factory=list)  # names read from a module's dict
    attributes: list[str] = field(default_factory=list)  # attributes read generically
    methods: list[str] = field(default_factory=list)  # methods called generically


def generated(root: Path = ROOT) -> Path | None:
    """The C mypyc generated for the native modules, if the project was built here (the
    newest: a build for another set of modules leaves the last one's beside it)."""
    found = list((root / "build").glob("__native_*.c"))
    return max(found, key=lambda path: path.stat().st_mtime) if found else None


def lookups(source: str) -> dict[str, Lookups]:
    """Every compiled function of the generated C ``source``, by mypyc's name for it."""
    starts = [(m.group(1), m.start()) for m in _FUNCTION.finditer(source)]
    found: dict[str, Lookups] = {}
    for name, start in starts:
        body = source[start : source.find("\n}\n", start)]
        seen = found[name] = Lookups()
        for m in _READS.finditer(body):
            (seen.dictionary if m.group(2) == "CPyDict_GetItem" else seen.attributes).append(
                m.group(1)
            )
        statics = dict(_STATIC.findall(body))
        seen.methods = [statics.get(var, "?") for var in _METHOD.findall(body)]
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.lookups``: one line per function, or why there is nothing to read."""
    p = argparse.ArgumentParser(prog="python -m bench.lookups", description=__doc__.split("\n")[0])
    p.add_argument("functions", nargs="*", help="mypyc's names (default: bench.lookups.PATH)")
    p.add_argument(
        "--source",
        type=Path,
        help="the generated C to read (default: this checkout's newest;"
        " another checkout's build/__native_*.c shows its code)",
    )
    args = p.parse_args(argv)
    path = args.source or generated()
    if path is None:
        print("no build/__native_*.c here: the native modules were not built (make)")
        return 2
    found = lookups(path.read_text())
    for name in args.functions or PATH:
        seen = found.get(name)
        if seen is None:
            print(f"{name}: no such compiled function")
            continue
        print(
            f"{name}: dictionary {seen.dictionary or '-'}, attributes {seen.attributes or '-'},"
            f" methods {seen.methods or '-'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
