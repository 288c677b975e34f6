"""Isolation between users, tried as a second, unprivileged user (nobody) against a real daemon
run by this one: it can open no IA, reach no admin call, fetch or hand over no segment, and read
no registered memory. Needs root (to act as another user); skipped otherwise, with that reason."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client.api import Ia
from client.desk import Desk
from fabricd.launch import Node, start_node


@pytest.fixture
def here() -> Iterator[Path]:
    """A directory under /tmp (pytest's own is owner-only, which would decide for us)."""
    top = Path(tempfile.mkdtemp(prefix="datfabric-iso-"))
    os.chmod(top, 0o755)
    yield top / "node"
    shutil.rmtree(top, ignore_errors=True)


NOBODY = 65534  # nobody:nogroup


def _attempt(fn: Callable[[], object]) -> str:
    try:
        fn()
        return "OK"
    except Exception as err:
        return type(err).__name__


def _as_other_user(sock: str, ia_name: str, segment: str) -> dict[str, str]:
    """What nobody gets for each try: OK, or the class of the error. A forked child drops to
    nobody:nogroup (no exec: the interpreter may live where nobody cannot read)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            got = {
                "ia_open": _attempt(lambda: Ia(sock).close()),
                "admin": _attempt(lambda: socket.socket(socket.AF_UNIX).connect(sock + ".admin")),
                "desk": _attempt(lambda: socket.socket(socket.AF_UNIX).connect(sock + ".seg")),
                "fetch": _attempt(lambda: Desk(sock, ia_name).fetch(segment)),
            }
            os.write(write, json.dumps(got).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    os.waitpid(pid, 0)
    result: dict[str, str] = json.loads(out)
    return result


def _node(start_in: Path, name: str, extra: list[str]) -> Node:
    """A daemon whose socket directory nobody could reach if its permissions let it."""
    start_in.mkdir(mode=0o755)
    os.chmod(start_in, 0o755)
    return start_node(name, str(start_in / "sock" / f"{name}.sock"), extra=extra)


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as a second user needs root")
def test_another_user_reaches_nothing_of_a_daemon_it_was_not_given(here: Path) -> None:
    node = _node(here, "iso", [])
    try:
        with Ia(node.socket) as ia:
            evd = ia.evd_create(4)
            segment = f"datfabric-{ia.core.name}-eq{evd.handle}"
            got = _as_other_user(node.socket, ia.core.name, segment)
            assert ia.query()["adapter_name"] == "iso"
    finally:
        node.stop()
    assert got == {
        "ia_open": "DatProviderNotFound",  # the socket's directory is owner-only
        "admin": "PermissionError",
        "desk": "PermissionError",
        "fetch": "DatInsufficientResources",  # the desk cannot even be reached
    }, got


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as a second user needs root")
def test_a_group_member_opens_ias_but_reaches_no_other_ias_segments(here: Path) -> None:
    """--socket-group nogroup: nobody (in nogroup) may open IAs; it still reaches no admin call
    and is refused the segments of this user's IA (the desk checks the process, not the group)."""
    node = _node(here, "grp", ["--socket-group", "nogroup"])
    try:
        with Ia(node.socket) as ia:
            evd = ia.evd_create(4)
            segment = f"datfabric-{ia.core.name}-eq{evd.handle}"
            got = _as_other_user(node.socket, ia.core.name, segment)
    finally:
        node.stop()
    assert got == {
        "ia_open": "OK",
        "admin": "PermissionError",
        "desk": "OK",
        "fetch": "DatInvalidParameter",  # answered: no open IA of that process
    }, got
