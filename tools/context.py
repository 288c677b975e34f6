"""The image's build context, made on the host: nothing is fetched inside the build.

    build/wheels/    the project and its Python dependencies (pip wheel; dependencies cached)
    build/debs/      Debian's packages a C DAT program needs: dtest, dapltest (dapl2-utils),
                     libdat2 and msgpack-c's runtime (apt-get download, kept in the cache)
    build/provider/  libdatfabric.so, built here (make provider)

.dockerignore lets exactly these three in.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tools.steps import Missing, cache_dir, run, step

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
WHEEL_DIR = BUILD / "wheels"
DEB_DIR = BUILD / "debs"
PROVIDER_DIR = BUILD / "provider"
REPRODUCIBLE = "315532800"  # SOURCE_DATE_EPOCH: same sources, same wheel, a cached image layer

# Debian's C DAT programs and what the provider links, with every dependency that a slim Debian
# image (python:3.11-slim, or debootstrap's minbase) lacks: libdapl2 needs libibverbs1 and
# librdmacm1 (for OFED's own providers, unused here), they need libnl and adduser (libibverbs1
# makes its group at install). A list that is not closed fails the image build (dpkg -i).
DEBS = [
    "dapl2-utils",
    "libdapl2",
    "libibverbs1",
    "librdmacm1",
    "libnl-3-200",
    "libnl-route-3-200",
    "libmsgpackc2",
    "adduser",
]


def python_version() -> tuple[int, int]:
    return sys.version_info[0], sys.version_info[1]


def _dependencies() -> list[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps: list[str] = meta["project"]["dependencies"]
    build: list[str] = meta["build-system"]["requires"]
    return [*deps, *build, "wheel"]


def build_wheels() -> list[Path]:
    """The project's wheel and its dependencies' in build/wheels (dependencies cached)."""
    cache = cache_dir() / "wheels" / "cp{}{}".format(*python_version())
    cache.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(WHEEL_DIR, ignore_errors=True)
    WHEEL_DIR.mkdir(parents=True)
    for stale in BUILD.glob("lib*"):  # no stale modules in the wheel (build/lib, or build/
        shutil.rmtree(stale, ignore_errors=True)  # lib.<platform> with the client's C part)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    offline = [*pip, "wheel", "--no-index", "--find-links", str(cache), "-w", str(WHEEL_DIR)]
    env = {"SOURCE_DATE_EPOCH": REPRODUCIBLE}
    if run([*offline, str(ROOT)], check=False, env=env).returncode != 0:
        with step("pip wheel: the dependencies, into the cache"):
            run([*pip, "wheel", "-w", str(cache), *_dependencies()], timeout=900)
        run([*offline, str(ROOT)], env=env)
    return sorted(WHEEL_DIR.glob("*.whl"))


def host_suite(os_release: Path = Path("/etc/os-release")) -> str:
    """The Debian release of this host (its apt gives the packages, the image must match it)."""
    try:
        found = re.search(r"(?m)^VERSION_CODENAME=\"?(\w+)", os_release.read_text())
    except OSError:
        found = None
    if found is None:
        raise Missing(f"the C programs come from Debian's archive: {os_release} names no release")
    return found.group(1)


def fetch_debs() -> list[Path]:
    """DEBS as .deb files in build/debs, downloaded once per Debian release into the cache."""
    if shutil.which("apt-get") is None:
        raise Missing("the image's C programs are Debian packages: apt-get is needed to fetch them")
    cache = cache_dir() / "debs" / host_suite()
    cache.mkdir(parents=True, exist_ok=True)
    lacking = [name for name in DEBS if not list(cache.glob(f"{name}_*.deb"))]
    if lacking:
        with step(f"apt-get download {' '.join(lacking)}"):
            got = subprocess.run(
                ["apt-get", "download", *lacking], cwd=cache, capture_output=True, text=True
            )
            if got.returncode != 0:
                raise Missing(f"apt-get download failed: {got.stderr.strip()[-300:]}")
    shutil.rmtree(DEB_DIR, ignore_errors=True)
    DEB_DIR.mkdir(parents=True)
    for name in DEBS:
        newest = sorted(cache.glob(f"{name}_*.deb"))[-1]
        shutil.copy2(newest, DEB_DIR / newest.name)
    return sorted(DEB_DIR.glob("*.deb"))


def build_provider() -> Path:
    """libdatfabric.so built here (the image runs the same Debian release) into build/provider."""
    made = run(["make", "-C", str(ROOT / "provider"), "build/libdatfabric.so"], check=False)
    library = ROOT / "provider" / "build" / "libdatfabric.so"
    if made.returncode != 0 or not library.exists():
        said = (made.stderr or made.stdout).strip()[-300:]
        raise Missing(f"the C provider does not build (make provider needs libdapl-dev, "
                      f"libmsgpack-dev): {said}")  # fmt: skip
    shutil.rmtree(PROVIDER_DIR, ignore_errors=True)
    PROVIDER_DIR.mkdir(parents=True)
    return Path(shutil.copy2(library, PROVIDER_DIR / library.name))


def build_context() -> None:
    """Everything the Dockerfile copies: wheels, Debian packages, the provider."""
    build_wheels()
    fetch_debs()
    build_provider()
