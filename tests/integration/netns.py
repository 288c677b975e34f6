"""Two test hosts in network namespaces joined by a veth pair (ip netns, as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SUBNET = "10.213.{}.{}"


@dataclass
class Hosts:
    """The two namespaces, their veth ends and addresses."""

    ns: tuple[str, str]
    dev: tuple[str, str]
    addr: tuple[str, str]

    def link(self, up: bool) -> None:
        """Set host A's end of the link up or down (a cut cable: no packet answers)."""
        state = "up" if up else "down"
        _ip("-n", self.ns[0], "link", "set", self.dev[0], state)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    probe = f"dfprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as err:
        return f"ip netns add failed: {err.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


@contextmanager
def two_hosts(index: int = 0) -> Iterator[Hosts]:
    """Create two namespaces with a veth pair between them; remove them afterwards."""
    tag = f"{os.getpid() % 100000}{index}"
    ns = (f"dfa{tag}", f"dfb{tag}")
    dev = (f"vfa{tag}", f"vfb{tag}")
    net = 1 + (os.getpid() + index) % 250
    addr = (SUBNET.format(net, 1), SUBNET.format(net, 2))
    try:
        for name in ns:
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("link", "add", dev[0], "type", "veth", "peer", "name", dev[1])
        for name, d, a in zip(ns, dev, addr, strict=True):
            _ip("link", "set", d, "netns", name)
            _ip("-n", name, "addr", "add", f"{a}/24", "dev", d)
            _ip("-n", name, "link", "set", d, "up")
        yield Hosts(ns, dev, addr)
    finally:
        for name in ns:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
