"""The provider's tests share one fixture: the library and its test programs, built plain and
sanitized (skipped, with the reason, where the machine cannot build them)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.datconf import ROOT

PROVIDER = ROOT / "provider"
NEEDS = {
    "a C compiler (cc)": shutil.which("cc") is not None,
    "make": shutil.which("make") is not None,
    "the DAT 2.0 headers (libdapl-dev)": Path("/usr/include/dat2/udat.h").exists(),
    "msgpack for C (libmsgpack-dev)": Path("/usr/include/msgpack.h").exists(),
}


@pytest.fixture(scope="session")
def build() -> Iterator[Path]:
    """Build the provider and its tests, plain and sanitized (skip if the machine cannot)."""
    missing = [what for what, present in NEEDS.items() if not present]
    if missing:
        pytest.skip(f"cannot build the C provider without {', '.join(missing)}")
    done = subprocess.run(
        ["make", "-s", "-C", str(PROVIDER), "all", "sanitize"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    yield PROVIDER / "build"
