"""The Makefile's choice of interpreter: the distribution's python3 when it is 3.11 or later
(an optimised build), and a venv made from another interpreter made again."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = Path("/usr/bin/python3")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def make(*args: str) -> str:
    """``make -s ARGS`` in the project; its output."""
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def system_is_recent() -> bool:
    if not SYSTEM.exists():
        return False
    probe = [str(SYSTEM), "-c", "import sys; sys.exit(sys.version_info < (3, 11))"]
    return subprocess.run(probe, check=False).returncode == 0


def test_the_venv_runs_on_the_distributions_interpreter_when_it_is_recent(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    make(f"VENV={venv}", f"{venv}/.python")
    chosen = (venv / ".python").read_text().strip()
    if system_is_recent():
        assert chosen == str(SYSTEM)
    else:
        assert chosen == shutil.which("python3")


def test_a_venv_of_another_interpreter_is_made_again(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    make(f"VENV={venv}", f"PYTHON={sys.executable}", f"{venv}/.python")
    (venv / "made-from-the-first").write_text("")
    make(f"VENV={venv}", f"PYTHON={sys.executable}", f"{venv}/.python")
    assert (venv / "made-from-the-first").exists(), "the same interpreter keeps the venv"
    other = shutil.which("sh")
    assert other is not None
    make(f"VENV={venv}", f"PYTHON={other}", f"{venv}/.python")
    assert not (venv / "made-from-the-first").exists()
    assert (venv / ".python").read_text().strip() == other
