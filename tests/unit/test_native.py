"""proto/native.py: the compiled modules are used only when the build is current and
DATFABRIC_INTERPRETED is unset; otherwise every NATIVE module loads from its source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proto import native


def _where(module: str, interpreted: bool) -> str:
    """The file ``module`` loads from in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k != native.ENV}
    if interpreted:
        env[native.ENV] = "1"
    code = f"import {module} as m; print(m.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=native.ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_every_native_module_has_its_source_and_none_is_a_package() -> None:
    for module in native.NATIVE:
        assert native.source(module).is_file(), module
        assert not module.endswith("__init__")
    assert "proto.native" not in native.NATIVE, "the loader's rule runs before any of them"


def test_the_build_is_current_only_with_every_source_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(native.ENV, raising=False)
    sums = tmp_path / "native.sums"
    monkeypatch.setattr(native, "SUMS", sums)
    assert native.why_interpreted() == "no native build"
    current = native.sums()
    sums.write_text(json.dumps(current))
    assert native.why_interpreted() is None
    sums.write_text(json.dumps({**current, "fabricd.nic.runs": "0" * 64}))
    assert native.why_interpreted() == "a source changed since the native build (make builds again)"
    sums.write_text("{not json")
    assert native.why_interpreted() == "no native build"
    sums.write_text(json.dumps(current))
    monkeypatch.setenv(native.ENV, "1")
    assert native.why_interpreted() == "DATFABRIC_INTERPRETED is set"


def test_the_finder_gives_each_native_module_its_source_and_no_other() -> None:
    finder = native._Sources()
    spec = finder.find_spec("fabricd.nic.runs", None)
    assert spec is not None and spec.origin == str(native.source("fabricd.nic.runs"))
    assert finder.find_spec("fabricd.cli", None) is None
    assert finder.find_spec("proto.constants", None) is None


def test_interpreted_the_modules_load_from_their_sources() -> None:
    for module in ("fabricd.nic.initiator", "proto.codec"):
        assert _where(module, interpreted=True) == str(native.source(module))


@pytest.mark.skipif(native.why_interpreted() is not None, reason="no current native build")
def test_a_current_build_loads_the_compiled_modules() -> None:
    for module in ("fabricd.nic.initiator", "proto.codec"):
        assert _where(module, interpreted=False).endswith(".so")


@pytest.mark.skipif(not os.environ.get("CI"), reason="only CI's fresh build must be current")
def test_ci_tests_the_compiled_modules() -> None:
    """What a user runs is what CI tests: a fresh install compiles the native modules."""
    assert native.why_interpreted() is None
