"""fabricd.runtime: the daemon's process settings. Each runs in a child interpreter, since it
changes that process for good."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
