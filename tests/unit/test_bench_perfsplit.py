"""bench.perfsplit's core: ``perf report --sort pid,dso`` rows read as each process's shares
by part, and a process's line (perf itself runs in tests/integration/test_bench_smoke.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.perfsplit import PARTS, PerfFailed, Recording, line, parse, part
from tests.perf_runs import read

REPORT = """\
# To display the perf.data header info, please use --header/--header-only options.
#
    40.00%    100:python3  python3.11
    15.00%    100:python3  [kernel.kallsyms]
     2.50%    100:python3  loop.cpython-311-x86_64-linux-gnu.so
     1.25%    100:python3  _cmsgpack.cpython-311-x86_64-linux-gnu.so
     0.75%    100:python3  _plaintake.cpython-311-x86_64-linux-gnu.so
     0.50%    100:python3  libc.so.6
    12.00%    200:python3  [kernel.kallsyms]
     6.00%    200:python3  /usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0
     1.00%    200:python3  _ringtake.cpython-311-x86_64-linux-gnu.so
     1.00%    200:python3  libcrypto.so.3
"""


@pytest.mark.parametrize(
    ("dso", "expected"),
    [
        ("[kernel.kallsyms]", "kernel"),
        ("python3.11", "interpreter"),
        ("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "interpreter"),
        ("loop.cpython-311-x86_64-linux-gnu.so", "uvloop"),
        ("_cmsgpack.cpython-311-x86_64-linux-gnu.so", "msgpack"),
        ("_lanes.cpython-311-x86_64-linux-gnu.so", "project C"),
        ("/work/client/_ringpost.cpython-311-x86_64-linux-gnu.so", "project C"),
        ("/work/b1a7217d59cc6f2c65ca__mypyc.cpython-311-x86_64-linux-gnu.so", "compiled"),
        ("libc.so.6", "libc"),
        ("/work/provider/build/libdatfabric.so", "provider"),
        ("/lib/x86_64-linux-gnu/libdat2.so.2", "provider"),
        ("/lib/x86_64-linux-gnu/libmsgpackc.so.2", "msgpack"),
        ("post_reap", "other"),
        ("[vdso]", "libc"),
        ("libcrypto.so.3", "other"),
        ("_lanes_extra.so", "other"),  # a name that only starts like the project's
    ],
)
def test_each_shared_object_counts_in_its_part(dso: str, expected: str) -> None:
    assert part(dso) == expected


def test_a_report_is_each_processs_shares_of_its_own_samples() -> None:
    """Comment lines are skipped; each process's parts add up to 1 whatever its share of all
    samples."""
    shares = parse(REPORT.splitlines())
    assert set(shares) == {100, 200}
    first, second = shares[100], shares[200]
    assert first["interpreter"] == pytest.approx(40 / 60) and first["kernel"] == 0.25
    assert first["uvloop"] == pytest.approx(2.5 / 60)
    assert first["project C"] == pytest.approx(0.75 / 60) and first["other"] == 0
    assert second == pytest.approx(
        {"kernel": 0.6, "interpreter": 0.3, "project C": 0.05, "other": 0.05, "uvloop": 0,
         "msgpack": 0, "provider": 0, "libc": 0, "compiled": 0}
    )  # fmt: skip
    assert all(sum(each.values()) == pytest.approx(1) for each in shares.values())


def test_a_line_gives_microseconds_per_part_in_order_and_leaves_out_the_tiny() -> None:
    shares = dict.fromkeys(PARTS, 0.0) | {"kernel": 0.25, "interpreter": 0.745, "libc": 0.005}
    text = line("its daemon", shares, 8.0)
    assert text == "  its daemon    of its 8.00 us: kernel 2.0, interpreter 6.0"  # libc's 0.04 out
    assert read(text) == ("its daemon", 8.0, {"kernel": 2.0, "interpreter": 6.0})
    assert read("  its daemon    per operation: CPU  5.73 us (user  4.8, kernel  1.5)") is None


def test_a_perf_that_fails_to_start_is_an_error_with_its_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A perf that exits at once (here a stand-in on PATH that says why and exits 1): making
    the Recording raises PerfFailed with perf's status and words (it does not wait out its
    deadline for an answer)."""
    fake = tmp_path / "bin" / "perf"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'perf_event_paranoid forbids it' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(PerfFailed) as raised:
        Recording(str(tmp_path / "perf.data"))
    assert str(raised.value) == (
        "perf record did not start (exit 1: perf_event_paranoid forbids it)"
    )
