"""The project's C extensions under AddressSanitizer and UndefinedBehaviorSanitizer: each built
here with both, loaded in place of the installed module, then its differential tests (against
the rules in Python, every argument shape, each wrong in one or more ways) run on it in a child
process; a sanitizer's finding ends that process with its report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
RUN = """
import importlib, importlib.util, sys
name, built, user, tests = sys.argv[1:5]
spec = importlib.util.spec_from_file_location(name, built)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules[name] = module
assert importlib.import_module(name) is module
assert module in vars(importlib.import_module(user)).values(), "its caller binds this one"
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", tests]))
"""
EXTENSIONS = [
    ("client._ringpost", "client/_ringpost.c", "client.posting", "tests/core/test_post_inline.py"),
    ("client._ringtake", "client/_ringtake.c", "client.eventing", "tests/unit/test_ringtake.py"),
    ("fabricd._plaintake", "fabricd/_plaintake.c", "fabricd.nic.initiator",
     "tests/unit/test_plaintake.py"),
    ("fabricd._landing", "fabricd/_landing.c", "fabricd.nic.remote_access",
     "tests/unit/test_landing.py"),
    ("fabricd._receives", "fabricd/_receives.c", "fabricd.nic.target",
     "tests/unit/test_receives.py"),
    ("fabricd._lanes", "fabricd/_lanes.c", "fabricd.nic.lane", "tests/unit/test_lanes.py"),
    ("proto._scatter", "proto/_scatter.c", "proto.codec", "tests/unit/test_scatter.py"),
    ("proto._rows", "proto/_rows.c", "proto.events", "tests/unit/test_rows.py"),
    ("proto._pack", "proto/_pack.c", "proto.codec", "tests/unit/test_pack.py"),
]  # fmt: skip
"""(module, source, the module that imports it, its differential tests)"""
LIBRARIES = {"fabricd._lanes": ["-lmsgpackc"]}  # as setup.py links them


def _runtime(name: str) -> str | None:
    path = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return path if os.path.isabs(path) else None


@pytest.mark.parametrize(
    ("name", "source", "user", "tests"), EXTENSIONS, ids=[e[0] for e in EXTENSIONS]
)
def test_the_c_extension_is_clean_under_asan_and_ubsan(
    tmp_path: Path, name: str, source: str, user: str, tests: str
) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc on this machine")
    runtimes = [_runtime("libasan.so"), _runtime("libubsan.so")]
    if None in runtimes:
        pytest.skip("gcc has no sanitizer runtimes here")
    built = tmp_path / f"{name.rpartition('.')[2]}.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-std=c11", "-O1", "-g", *SANITIZE,
         "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'provider'}",
         f"-I{sysconfig.get_paths()['include']}", str(ROOT / source),
         *LIBRARIES.get(name, []), "-o", str(built)],
        check=True,
    )  # fmt: skip
    env = dict(
        os.environ,
        LD_PRELOAD=" ".join(str(r) for r in runtimes),
        ASAN_OPTIONS="detect_leaks=0",  # the interpreter's own allocations, never freed
        UBSAN_OPTIONS="print_stacktrace=1",
    )
    proc = subprocess.run(
        [sys.executable, "-c", RUN, name, str(built), user, tests],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "passed" in proc.stdout and "ERROR: AddressSanitizer" not in proc.stderr
