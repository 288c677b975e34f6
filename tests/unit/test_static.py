"""Layer 1 of DESIGN.md section 8: ruff, mypy --strict, and pure cores that import no I/O."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's bin: ruff and mypy are installed beside python

# proto/ whole, the cores named in DESIGN.md, and the package __init__s every import of them runs
PURE_MODULES = [
    *sorted(ROOT.glob("proto/*.py")),
    ROOT / "fabricd" / "__init__.py",
    ROOT / "fabricd" / "nic.py",
    ROOT / "fabricd" / "memory.py",
    ROOT / "fabricd" / "faults.py",
    ROOT / "client" / "__init__.py",
    ROOT / "client" / "core.py",
]
IO_MODULES = frozenset(
    {
        "asyncio",
        "socket",
        "time",
        "random",
        "select",
        "mmap",
        "os",
        "subprocess",
        "threading",
        "uvloop",
    }
)


def _run_tool(name: str, *args: str) -> None:
    tool = BIN / name
    if not tool.exists():
        pytest.skip(f"{name} is not installed next to {sys.executable} (pip install {name})")
    proc = subprocess.run(
        [str(tool), *args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, (
        f"{name} {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    )


def test_ruff() -> None:
    _run_tool("ruff", "check", "proto", "fabricd", "client", "bench", "tests")


def test_mypy_strict() -> None:
    _run_tool("mypy")  # packages and strict = true come from pyproject.toml


# --- purity ------------------------------------------------------------------------------------


def imported_modules(source: str) -> set[str]:
    """Absolute names of every module an AST imports, anywhere in the file (functions too).

    ``import a.b`` gives ``a.b``; ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (c may be a
    submodule). Relative imports are resolved against nothing and kept with their dots.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.add(base)
            sep = "" if base.endswith(".") else "."
            found.update(f"{base}{sep}{alias.name}" for alias in node.names)
    return found


def io_imports(source: str) -> set[str]:
    """The imported names whose top-level package is one of the I/O modules."""
    return {name for name in imported_modules(source) if name.split(".")[0] in IO_MODULES}


def test_io_import_detector() -> None:
    """The detector itself: every import form is seen, look-alikes are not."""
    source = """
import os.path
import socket as sk
from time import monotonic
from asyncio.events import AbstractEventLoop
import json, select
def later():
    import mmap
    from subprocess import run
class C:
    from threading import Lock
if True:
    import uvloop
try:
    import random
except ImportError:
    pass
import ossaudiodev
import timeit
from typing import Any
from . import time_utils
"""
    assert {name.split(".")[0] for name in io_imports(source)} == IO_MODULES
    assert not io_imports("import ossaudiodev\nimport timeit\nfrom . import os\n")


@pytest.mark.parametrize("path", PURE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_core_imports_no_io(path: Path) -> None:
    bad = io_imports(path.read_text(encoding="utf-8"))
    assert not bad, f"{path.relative_to(ROOT)} imports I/O modules: {sorted(bad)}"


@pytest.mark.parametrize("path", PURE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_core_imports_only_pure_project_modules(path: Path) -> None:
    """A pure core may use other project modules only if they are pure cores themselves."""
    pure = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in PURE_MODULES}
    pure |= {name.removesuffix(".__init__") for name in pure}
    project = ("proto", "fabricd", "client", "bench")
    bad: set[str] = set()
    for name in imported_modules(path.read_text(encoding="utf-8")):
        if name.startswith("."):
            bad.add(name)  # relative imports hide what they reach; the project uses absolute ones
        elif (
            name.split(".")[0] in project
            and name not in pure
            # ``from proto.x import Name`` yields proto.x.Name: accept it when proto.x is pure
            and name.rsplit(".", 1)[0] not in pure
        ):
            bad.add(name)
    assert not bad, f"{path.relative_to(ROOT)} imports non-pure project modules: {sorted(bad)}"


def test_pure_module_list_is_complete() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PURE_MODULES}
    assert {
        "proto/__init__.py",
        "proto/codec.py",
        "proto/ep_states.py",
        "proto/frames.py",
        "proto/errors.py",
        "fabricd/nic.py",
        "fabricd/memory.py",
        "fabricd/faults.py",
        "client/core.py",
    } <= names
    assert all(p.is_file() for p in PURE_MODULES)


def test_project_import_checker_flags_impure_modules() -> None:
    """The checker behind test_pure_core_imports_only_pure_project_modules, on a sample."""
    names = imported_modules(
        "from fabricd.shm import ShmMapper\nfrom proto.codec import encode\nimport client.api\n"
        "from . import sibling\n"
    )
    assert names == {
        "fabricd.shm",
        "fabricd.shm.ShmMapper",
        "proto.codec",
        "proto.codec.encode",
        "client.api",
        ".",
        ".sibling",
    }
