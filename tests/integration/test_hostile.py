"""What a careless or hostile neighbour must not achieve (docs/security.md): each test is one
finding of the security review, run against real daemons."""

from __future__ import annotations

import os
import resource

import pytest

from client.api import Ia
from fabricd.launch import Node
from proto.constants import EvdFlags, EventNumber
from tests.conftest import StartNode

HIGH_FD = 1100  # past select(2)'s FD_SETSIZE (1,024)


def test_an_ia_whose_socket_is_a_high_descriptor_works(start: StartNode) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HIGH_FD + 64:
        pytest.skip(f"the descriptor limit ({hard}) is below {HIGH_FD + 64}")
    node: Node = start("fd")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH_FD + 64), hard))
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(HIGH_FD)]
    try:
        with Ia(node.socket) as ia:
            assert ia.sock.fileno() >= 1024
            evd = ia.evd_create(4, EvdFlags.SOFTWARE)
            evd.post_se(7)
            event, _ = evd.wait(5_000_000)
            assert (event.event_number, event.pointer) == (EventNumber.SOFTWARE_EVENT, 7)
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
