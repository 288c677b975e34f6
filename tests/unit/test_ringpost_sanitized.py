"""client/_ringpost.c under AddressSanitizer and UndefinedBehaviorSanitizer: built here with
both, loaded in place of the installed module, then the inline post's differential test (every
argument shape, each wrong in one or more ways, against the general checks) runs on it in a
child process; a sanitizer's finding ends that process with its report."""

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
import importlib.util, sys
spec = importlib.util.spec_from_file_location("client._ringpost", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["client._ringpost"] = module
import client.posting
assert client.posting.ringpost is module
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/core/test_post_inline.py"]))
"""


def _runtime(name: str) -> str | None:
    path = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return path if os.path.isabs(path) else None


def test_the_c_post_is_clean_under_asan_and_ubsan(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc on this machine")
    runtimes = [_runtime("libasan.so"), _runtime("libubsan.so")]
    if None in runtimes:
        pytest.skip("gcc has no sanitizer runtimes here")
    built = tmp_path / "_ringpost.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-std=c11", "-O1", "-g", *SANITIZE,
         "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'provider'}",
         f"-I{sysconfig.get_paths()['include']}", str(ROOT / "client" / "_ringpost.c"),
         "-o", str(built)],
        check=True,
    )  # fmt: skip
    env = dict(
        os.environ,
        LD_PRELOAD=" ".join(str(r) for r in runtimes),
        ASAN_OPTIONS="detect_leaks=0",  # the interpreter's own allocations, never freed
        UBSAN_OPTIONS="print_stacktrace=1",
    )
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(built)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "passed" in proc.stdout and "ERROR: AddressSanitizer" not in proc.stderr
