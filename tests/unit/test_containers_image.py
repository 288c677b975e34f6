"""tools.image without an engine: the image step against a scripted one (a rebuild leaves
no image behind), the Debian mirror it picks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tools import context, image
from tools.engine import Engine
from tools.image import IMAGE
from tools.steps import Missing


class ScriptedEngine(Engine):
    """Records the engine commands; `build` gives IMAGE the next id of ``ids``."""

    def __init__(self, ids: list[str | None]) -> None:
        super().__init__(["engine"], ["engine", "compose"])
        self.ids = ids
        self.tagged: str | None = ids.pop(0)
        self.calls: list[tuple[str, ...]] = []

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        if args[:2] == ("image", "inspect"):
            if self.tagged is None:
                return subprocess.CompletedProcess(args, 1, "", f"no such image: {IMAGE}")
            return subprocess.CompletedProcess(args, 0, self.tagged + "\n", "")
        if args[0] == "build":
            self.tagged = self.ids.pop(0)
        return subprocess.CompletedProcess(args, 0, "", "")


@pytest.fixture(autouse=True)
def no_wheels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image, "build_context", lambda: None)


def removed(engine: ScriptedEngine) -> list[tuple[str, ...]]:
    return [c for c in engine.calls if c[0] == "rmi"]


def test_a_rebuild_from_changed_sources_removes_the_image_it_replaced() -> None:
    engine = ScriptedEngine(["sha256:old", "sha256:new"])
    image.build_image(engine, "base")
    assert removed(engine) == [("rmi", "sha256:old")]


def test_a_rebuild_giving_the_same_image_removes_nothing() -> None:
    engine = ScriptedEngine(["sha256:same", "sha256:same"])
    image.build_image(engine, "base")
    assert removed(engine) == []


def test_a_first_build_removes_nothing() -> None:
    engine = ScriptedEngine([None, "sha256:new"])
    image.build_image(engine, "base")
    assert removed(engine) == []


def test_the_debian_mirror_is_one_apt_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATFABRIC_DEBIAN_MIRROR", raising=False)
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "a-cloud.list.disabled").write_text("deb https://packages.example/apt cloud main\n")
    (parts / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
        "\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    )
    assert image.debian_mirror(tmp_path) == "http://mirror.example/debian"
    (parts / "debian.sources").unlink()
    assert image.debian_mirror(tmp_path) == image.DEFAULT_MIRROR


def test_the_debian_release_is_the_hosts(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\n')
    assert context.host_suite(release) == "bookworm"
    release.write_text('NAME="Alpine Linux"\n')
    with pytest.raises(Missing, match="names no release"):
        context.host_suite(release)
    with pytest.raises(Missing):
        context.host_suite(tmp_path / "absent")
