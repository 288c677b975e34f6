"""fabricd.runtime: the daemon's process settings. Each that changes the process runs in a child
interpreter, since it changes that process for good; the CPU lists of fabricd --cpus and
fabricctl bench --daemon-cpus are read here."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap

import pytest

from bench.nodes import daemon_cpus
from fabricd.runtime import cpu_list

CHECK = """
import enum, sys
from fabricd.runtime import plain_enum_access
from proto.constants import Dtos, MemPriv

removed = plain_enum_access()
assert removed == (sys.version_info < (3, 12)), removed
assert plain_enum_access() is False, "a second call changes nothing"
assert "__getattr__" not in vars(enum.EnumType)
assert Dtos.SEND is Dtos(0) is Dtos["SEND"] and Dtos.RDMA_WRITE.name == "RDMA_WRITE"
assert MemPriv.LOCAL_READ | MemPriv.REMOTE_WRITE in MemPriv.ALL
try:
    Dtos.NO_SUCH_DTO
except AttributeError:
    pass
else:
    raise AssertionError("a missing member must still raise AttributeError")
try:
    Dtos.__no_such_dunder__
except AttributeError:
    pass
else:
    raise AssertionError("a missing dunder must still raise AttributeError")
"""


def test_plain_enum_access_keeps_every_way_to_reach_a_member() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHECK)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


SCHEDULING = """
import os, threading
from fabricd.runtime import scheduling

assert scheduling("normal") is None  # whatever policy the test runner itself has
assert os.sched_getscheduler(0) == os.SCHED_OTHER
assert scheduling("batch") is None
assert os.sched_getscheduler(0) == os.SCHED_BATCH
seen = []
later = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
later.start()
later.join()
assert seen == [os.SCHED_BATCH], "a thread started afterwards (uvloop's) inherits it"
assert scheduling("normal") is None
assert os.sched_getscheduler(0) == os.SCHED_OTHER
"""


def test_scheduling_sets_the_policy_of_the_process_and_its_later_threads() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCHEDULING)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("1", {1}), ("0,2", {0, 2}), ("0-3,6", {0, 1, 2, 3, 6}), ("2-2", {2}), ("1,1", {1})],
)
def test_a_cpu_list_is_read_as_taskset_writes_it(text: str, cpus: set[int]) -> None:
    assert cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1,", ",1", "-1", "1-", "3-1", "1 2", "0x1", "1-2-3"])
def test_anything_else_is_not_a_cpu_list(text: str) -> None:
    with pytest.raises(ValueError, match=r"CPU list|backwards"):
        cpu_list(text)


@pytest.mark.parametrize(
    ("text", "pair"), [("1:0", ("1", "0")), ("0-1:", ("0-1", "")), (":1", ("", "1"))]
)
def test_daemon_cpus_name_the_initiators_and_the_targets(text: str, pair: tuple[str, str]) -> None:
    assert daemon_cpus(text) == pair


@pytest.mark.parametrize("text", ["1", ":", "1:x", "a:0", "1:0:2"])
def test_daemon_cpus_refuse_anything_else(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        daemon_cpus(text)
