"""The image datfabric:local, built with nothing fetched inside the build: the base image (the
stock Python image when a registry gives it, else one made from Debian's archive with
debootstrap), then the project's wheels, Debian's C DAT programs and the C provider on top
(tools.containers uses it)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from tools.context import build_context, python_version
from tools.engine import Engine
from tools.steps import Missing, cache_dir, run, say, step

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "datfabric:local"
DEBIAN_SUITES = {(3, 11): "bookworm", (3, 13): "trixie"}  # Debian's python3 is what the wheels need
DEBIAN_PACKAGES = ["python3", "python3-venv", "iproute2"]
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def stock_base() -> str:
    major, minor = python_version()
    return f"python:{major}.{minor}-slim"


def debian_suite() -> str:
    suite = DEBIAN_SUITES.get(python_version())
    if suite is None:
        known = ", ".join(f"{a}.{b}" for a, b in DEBIAN_SUITES)
        raise Missing(
            f"no registry gave {stock_base()}, and no Debian release ships Python "
            f"{'.'.join(map(str, python_version()))} to build a local base (known: {known}); "
            "run with a Python of one of those, or set DATFABRIC_BASE to an image you have"
        )
    return suite


def debian_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The host's own Debian mirror (apt's sources), else Debian's default."""
    if "DATFABRIC_DEBIAN_MIRROR" in os.environ:
        return os.environ["DATFABRIC_DEBIAN_MIRROR"]
    parts = etc_apt / "sources.list.d"
    # what apt reads: a file named otherwise (`x.list.disabled`, `x.sources.save`) is not a source
    sources = [etc_apt / "sources.list", *sorted([*parts.glob("*.list"), *parts.glob("*.sources")])]
    for path in sources:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                found = re.match(r"\s*(?:URIs:|deb(?:\s+\[[^\]]*\])?)\s+(\S+)", line)
                if found and not found.group(1).rstrip("/").endswith("-security"):
                    return found.group(1)
    return DEFAULT_MIRROR


def make_local_base(engine: Engine, name: str, suite: str) -> None:
    """A base image from Debian's archive: the cached tarball, or debootstrap then the tarball."""
    tarball = cache_dir() / "base" / f"debian-{suite}.tar"
    if not tarball.exists():
        if shutil.which("debootstrap") is None or os.geteuid() != 0:
            raise Missing(
                f"no registry gave {stock_base()}, and a local base image needs debootstrap, "
                "run as root (apt-get install debootstrap)"
            )
        rootfs = tarball.with_suffix(".rootfs")
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        try:
            with step(f"debootstrap {suite} from {debian_mirror()}"):
                include = ",".join(DEBIAN_PACKAGES)
                run(
                    ["debootstrap", "--variant=minbase", f"--include={include}", suite,
                     str(rootfs), debian_mirror()],
                    timeout=1200,
                )  # fmt: skip
            for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for item in (rootfs / junk).glob("*"):
                    if item.is_file():
                        item.unlink()
            partial = tarball.with_suffix(".partial")
            run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], timeout=600)
            partial.rename(tarball)
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)
    with step(f"import {tarball.name} as {name}"):
        engine("import", str(tarball), name)


def ensure_base(engine: Engine) -> str:
    """The base image: DATFABRIC_BASE, else the stock Python image, else a local Debian one."""
    wanted = os.environ.get("DATFABRIC_BASE")
    if wanted:
        if not engine.has_image(wanted):
            with step(f"pull {wanted}"):
                engine("pull", wanted, timeout=900)
        return wanted
    stock = stock_base()
    if engine.has_image(stock):
        return stock
    pulled = engine("pull", stock, check=False, timeout=900)
    if pulled.returncode == 0:
        return stock
    reason = (pulled.stderr.strip().splitlines() or ["no reason given"])[-1]
    suite = debian_suite()
    local = f"datfabric-base:{suite}"
    if not engine.has_image(local):
        say(f"no registry gives {stock} ({reason}): making {local} from Debian's archive")
        make_local_base(engine, local, suite)
    return local


def image_id(engine: Engine, name: str) -> str | None:
    """The id of image ``name``, None when the engine has none by that name."""
    found = engine("image", "inspect", "--format", "{{.Id}}", name, check=False, timeout=60)
    if found.returncode != 0:
        return None
    return found.stdout.strip() or None


def build_image(engine: Engine, base: str) -> None:
    """datfabric:local from the build context (tools.context) on ``base``, no network inside.

    The image it replaces (the sources changed) is removed: untagged, it would stay in the
    engine's store, one per change, until pruned. A container still using it keeps it.
    """
    with step(f"build {IMAGE} on {base}"):
        build_context()
        previous = image_id(engine, IMAGE)
        engine("build", "--network", "none", "--build-arg", f"BASE={base}", "-t", IMAGE, str(ROOT))
        if previous is not None and previous != image_id(engine, IMAGE):
            engine("rmi", previous, check=False, timeout=120)


def ensure_image(engine: Engine) -> str:
    """Base image and project image; returns the base used."""
    with step("base image"):
        base = ensure_base(engine)
    build_image(engine, base)
    return base
