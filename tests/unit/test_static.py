"""Layer 1 of DESIGN.md section 8: ruff, mypy --strict, and pure cores that import no I/O."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's bin: ruff and mypy are installed beside python

PACKAGES = ("proto", "fabricd", "client", "bench", "tools")

# proto/ whole, the cores named in DESIGN.md, and the package __init__s every import of them runs;
# the NIC core is fabricd/nic.py or, once split up, every module of the package fabricd/nic/
PURE_MODULES = [
    *sorted(ROOT.glob("proto/*.py")),
    ROOT / "fabricd" / "__init__.py",
    ROOT / "fabricd" / "memory.py",
    ROOT / "fabricd" / "procmem.py",
    ROOT / "fabricd" / "faults.py",
    *([ROOT / "fabricd" / "nic.py"] if (ROOT / "fabricd" / "nic.py").is_file() else []),
    *sorted((ROOT / "fabricd" / "nic").glob("*.py")),
    ROOT / "client" / "__init__.py",
    ROOT / "client" / "core.py",
    ROOT / "client" / "posting.py",
    ROOT / "client" / "postrules.py",
    ROOT / "client" / "eventing.py",
    ROOT / "client" / "memcalls.py",
    ROOT / "client" / "srqs.py",
    ROOT / "client" / "cmcalls.py",
    ROOT / "client" / "records.py",
]
LOADERS = {ROOT / "proto" / "native.py": {"os"}}
"""Pure modules allowed some I/O modules, and which: proto/native.py reads the native build's
sums and DATFABRIC_INTERPRETED once, as proto is first imported (which file a module loads
from, not what it does)."""
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
    _run_tool("ruff", "check", *PACKAGES, "tests")


def test_mypy_strict() -> None:
    _run_tool("mypy")  # packages and strict = true come from pyproject.toml


# --- purity ------------------------------------------------------------------------------------


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST, runtime_only: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of a tree; with ``runtime_only``, not those under ``if
    TYPE_CHECKING:`` (its ``else:`` branch runs, so that one is kept)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif runtime_only and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def imported_modules(source: str, runtime_only: bool = False) -> set[str]:
    """Absolute names of every module an AST imports, anywhere in the file (functions too);
    ``runtime_only`` leaves out the imports under ``if TYPE_CHECKING:``.

    ``import a.b`` gives ``a.b``; ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (c may be a
    submodule). Relative imports are resolved against nothing and kept with their dots.
    """
    found: set[str] = set()
    for node in _import_nodes(ast.parse(source), runtime_only):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        else:
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
    bad = io_imports(path.read_text(encoding="utf-8")) - LOADERS.get(path, set())
    assert not bad, f"{path.relative_to(ROOT)} imports I/O modules: {sorted(bad)}"


@pytest.mark.parametrize("path", PURE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_core_imports_only_pure_project_modules(path: Path) -> None:
    """A pure core may use other project modules only if they are pure cores themselves."""
    pure = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in PURE_MODULES}
    pure |= {name.removesuffix(".__init__") for name in pure}
    project = PACKAGES
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
        "fabricd/memory.py",
        "fabricd/procmem.py",
        "fabricd/faults.py",
        "client/core.py",
        "client/records.py",
    } <= names
    nic = {n for n in names if n == "fabricd/nic.py" or n.startswith("fabricd/nic/")}
    assert nic, "the NIC core (fabricd/nic.py or fabricd/nic/*.py) is not in the list"
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


# --- layering: no import cycles, and a client library that needs no daemon ---------------------


def module_name(path: Path) -> str:
    """``fabricd/nic/__init__.py`` -> ``fabricd.nic``; ``bench/fabric.py`` -> ``bench.fabric``."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def resolve(name: str, module: str, is_package: bool) -> str:
    """An imported name made absolute: relative ones against the importing module's package."""
    level = len(name) - len(name.lstrip("."))
    if not level:
        return name
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    rest = name[level:]
    return ".".join([*base, rest] if rest else base)


def project_sources() -> dict[str, tuple[str, bool]]:
    """Every module of the project's packages: its name -> (source, is it a package)."""
    return {
        module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Module -> the modules of ``sources`` it imports at run time.

    Edges are the imports ``imported_modules`` sees (at any depth of a file) but for those under
    ``if TYPE_CHECKING:``: ``import a.b`` and ``from a.b import x`` reach a.b, ``from a import
    b`` reaches the module a.b (and the package a only for names that are not modules). The
    parent packages Python also runs, and a module's own name, are no edge.
    """
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        reached: set[str] = set()
        for node in _import_nodes(ast.parse(source), runtime_only=True):
            if isinstance(node, ast.Import):
                reached.update(alias.name for alias in node.names)
                continue
            base = resolve("." * node.level + (node.module or ""), module, is_package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}" if base else alias.name
                reached.add(submodule if submodule in sources else base)
        graph[module] = {name for name in reached if name in sources and name != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as ``[a, b, ..., a]``, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done and (cycle := visit(nxt)):
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done and (cycle := visit(start)):
            return cycle
    return None


def test_import_graph_helpers() -> None:
    """The graph builder and the cycle finder, on a sample (TYPE_CHECKING imports are no edge)."""
    sources = {
        "pkg": ("", True),
        "pkg.a": ("from pkg.b import f\nfrom pkg import VERSION\nimport os\n", False),
        "pkg.b": ("def f():\n    from . import c\n", False),
        "pkg.c": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
            "else:\n    import pkg\n",
            False,
        ),
    }
    graph = import_graph(sources)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b", "pkg"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg"}}
    assert find_cycle(graph) is None
    sources["pkg.c"] = ("import typing\nif typing.TYPE_CHECKING:\n    pass\nimport pkg.a\n", False)
    assert find_cycle(import_graph(sources)) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert resolve("..x.y", "pkg.sub.mod", False) == "pkg.x.y"
    assert resolve(".", "pkg.sub", True) == "pkg.sub"


def test_no_import_cycles() -> None:
    """No module of proto, fabricd, client, bench or tools reaches itself through run-time
    imports (a function-level import counts: it runs too)."""
    graph = import_graph(project_sources())
    assert {"proto.codec", "fabricd.faults", "client.api", "bench.fabric", "tools.ctl"} <= set(
        graph
    )
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


CLIENT_MAY_IMPORT = frozenset({"proto", "client", "msgpack"}) | sys.stdlib_module_names
CLIENT_MODULES = sorted((ROOT / "client").rglob("*.py"))


@pytest.mark.parametrize("path", CLIENT_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_client_imports_only_proto_and_itself(path: Path) -> None:
    """client/ is the consumer library: proto, itself, the standard library and msgpack; never
    the daemon, the benchmarks or the tools (not under TYPE_CHECKING, not in a function)."""
    module, is_package = module_name(path), path.name == "__init__.py"
    names = imported_modules(path.read_text(encoding="utf-8"))
    bad = {
        name
        for name in (resolve(n, module, is_package) for n in names)
        if name.split(".")[0] not in CLIENT_MAY_IMPORT
    }
    assert not bad, f"{path.relative_to(ROOT)} imports beyond proto, client, stdlib: {sorted(bad)}"


# --- one writer per state machine ------------------------------------------------------------


def attribute_writers(attribute: str) -> set[str]:
    """Modules of the NIC core that assign ``<anything>.<attribute> = ...`` (plain, tuple
    or augmented assignment)."""
    writers = set()
    for path in sorted((ROOT / "fabricd" / "nic").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                if any(isinstance(e, ast.Attribute) and e.attr == attribute for e in elts):
                    writers.add(path.name)
    return writers


def test_the_ep_driver_is_the_one_writer_of_ep_state() -> None:
    assert attribute_writers("state") == {"epdriver.py"}


def test_the_cm_table_is_the_one_writer_of_a_links_cm_state() -> None:
    assert attribute_writers("cm") == {"wire.py"}


def generic_alias_calls(source: str) -> list[int]:
    """Lines that call a subscripted builtin container (``list[Op]()``): each call builds a
    types.GenericAlias first, ~1 us against ~0.05 us for ``[]`` (timeit, CPython 3.11)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Subscript)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in {"list", "dict", "set", "tuple", "deque", "frozenset"}
    ]


def test_generic_alias_calls_are_found() -> None:
    assert generic_alias_calls("a = list[int]()\nb: list[int] = []\nc = deque[int](x)") == [1, 3]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_container_is_built_through_a_generic_alias(package: str) -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in generic_alias_calls(path.read_text(encoding="utf-8"))
    }
    assert not found, "annotate the name instead (x: list[T] = [])"
