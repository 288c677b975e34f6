"""The modules built as native code (mypyc compiles their typed Python, setup.py) and the rule
for using them: the compiled module is imported only when the build is current, every one
of its sources unchanged since it was compiled (their sha256 in ``SUMS``, which the build
writes); otherwise, or with DATFABRIC_INTERPRETED set, every one of them runs from its source.
All or none: a compiled module calls its compiled peers directly, so a source edited since
would be bypassed. The rules live in the source either way; the build only runs them faster
(a window-1 64 B RDMA Read's round trip 109 -> 94 us, docs/performance.md).

Run interpreted to patch or wrap the core's functions (bench.functions, bench.timeline, the
tests that count calls) or to try an edit without a build (``make`` builds again).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ENV = "DATFABRIC_INTERPRETED"
ROOT = Path(__file__).resolve().parent.parent  # where proto/ and fabricd/ are
SUMS = Path(__file__).resolve().with_name("native.sums")  # written by the build
NATIVE = (
    "fabricd.faults",
    "fabricd.memory",
    "fabricd.shm",
    "fabricd.streams",
    "fabricd.turn",
    *(
        f"fabricd.nic.{name}"
        for name in (
            "admin", "answers", "cm", "cork", "ep", "epdriver", "evds", "events", "faultpath",
            "hub", "initiator", "intake", "lane", "links", "lmr", "objects", "plain_recvs",
            "queues", "remote_access", "requests", "responder", "rmr", "routes", "runs",
            "send_run", "srq", "target", "views", "wire",
        )
    ),
    "proto.batch",
    "proto.codec",
    "proto.eventq",
    "proto.events",
    "proto.frames",
    "proto.hostif",
    "proto.plainwqe",
)  # fmt: skip
"""The daemon's data path and the protocol code it shares with the client (the hot half of a
round trip); __init__ modules, the CLI and the ctypes users stay interpreted."""

View = memoryview
"""A dataclass field of type memoryview is declared as View in NATIVE modules: mypyc 2.4
compiles the bare name into a look-up that fails at import (KeyError: 'memoryview')."""


def source(module: str) -> Path:
    """The source file of a module of NATIVE."""
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def sums() -> dict[str, str]:
    """Each NATIVE module's source sha256, as the build records them."""
    return {m: hashlib.sha256(source(m).read_bytes()).hexdigest() for m in NATIVE}


def why_interpreted() -> str | None:
    """Why the NATIVE modules run from their sources (None: the compiled ones are used)."""
    if os.environ.get(ENV):
        return f"{ENV} is set"
    try:
        built = json.loads(SUMS.read_text())
    except (OSError, ValueError):
        return "no native build"
    if built != sums():
        return "a source changed since the native build (make builds again)"
    return None


class _Sources(importlib.abc.MetaPathFinder):
    """Finds each NATIVE module as its source file, ahead of its compiled extension."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in NATIVE:
            return None
        return importlib.util.spec_from_file_location(fullname, source(fullname))


def steer() -> None:
    """Decide once per process, before the first NATIVE module is imported (proto's
    __init__ calls it): compiled, or every one from its source."""
    steered = any(isinstance(f, _Sources) for f in sys.meta_path)
    if not steered and why_interpreted() is not None:
        sys.meta_path.insert(0, _Sources())
