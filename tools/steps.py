"""Host commands for the container tools: steps that print their time, commands whose failure
carries what they printed, the cache directory kept between runs, and the error that says what
this machine lacks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path


class Missing(RuntimeError):
    """Something this machine lacks for running containers, said so a person can act on it."""


def cache_dir() -> Path:
    """Where wheels, the Debian base tarball, logs and state are kept between runs."""
    if "DATFABRIC_CACHE" in os.environ:
        return Path(os.environ["DATFABRIC_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "datfabric"


def say(text: str) -> None:
    print(f"containers: {text}", flush=True)


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """Print a step's name and, when it ends, how long it took."""
    say(f"{what} ...")
    started = time.monotonic()
    yield
    say(f"{what}: {time.monotonic() - started:.1f} s")


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing its output; a failure raises with what it printed."""
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc
