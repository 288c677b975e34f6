"""Smoke tests of bench.limits (real helper processes) and of bench.ucx's parser."""

from __future__ import annotations

import math
import os
import resource
import shutil

import pytest

from bench.limits import Limits, helper, measure, pace
from bench.ucx import UCX_MB, parse_ucx, run_ucx

# Captured on this machine (UCX 1.13, UCX_TLS=tcp UCX_NET_DEVICES=lo):
# `ucx_perftest 127.0.0.1 -p P -t ucp_get -s 4096 -n 1000` (no -f: a progress row, then Final).
UCX_GET_TABLE = """\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
[thread 0]               983   1078.145  1017.928  1017.928        3.84       3.84         982         982
Final:                  1000   1078.135  1141.001  1020.020        3.42       3.83         876         980
"""  # noqa: E501 (real output is 108 columns wide)

# `ucx_perftest 127.0.0.1 -p P -t ucp_get -s 1048576 -n 300 -f` (what bench.compare runs).
UCX_GET_FINAL_ONLY = """\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|     Test     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
                         300   1919.032  1799.380  1799.380      555.75     555.75         556         556
"""  # noqa: E501

# `ucx_perftest 127.0.0.1 -p P -t ucp_put_lat -s 65536 -n 1000 -v -f` (CSV).
UCX_PUT_LAT_CSV = """\
iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
1000,75.485,77.158,77.158,810.03,810.03,12960,12960
"""


def _positive_finite(x: float) -> bool:
    return math.isfinite(x) and x > 0


def test_measure_returns_positive_finite_limits() -> None:
    limits = measure(seconds=0.2)
    assert isinstance(limits, Limits)
    for value in (limits.tcp_stream_MBps, limits.rr_rtt_us, limits.rr_pipelined_per_s):
        assert _positive_finite(value)
    assert set(limits.to_json()) == {
        "limit_tcp_stream_MBps",
        "limit_rr_rtt_us",
        "limit_rr_pipelined_per_s",
    }
    assert all(_positive_finite(v) for v in limits.to_json().values())


def test_pace_is_the_best_of_three_loops_in_cpu_microseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pace(): three runs of the loop, each timed with the thread's CPU clock; the least."""
    readings = iter([1.0, 1.05, 2.0, 2.02, 3.0, 3.07])  # loops of 50, 20 and 70 ms
    monkeypatch.setattr("bench.limits.time.thread_time", lambda: next(readings))
    monkeypatch.setattr("bench.limits.PACE_LOOP", 10)
    assert pace() == pytest.approx(20_000)
    assert next(readings, None) is None  # read twice per loop, three loops


def test_parse_ucx_table_takes_the_final_row() -> None:
    r = parse_ucx(UCX_GET_TABLE)
    assert r.iters == 1000
    assert r.lat_p50_us == pytest.approx(1078.135)
    assert r.lat_avg_us == pytest.approx(1141.001)
    assert r.lat_overall_us == pytest.approx(1020.020)
    assert r.bw_avg_MiBps == pytest.approx(3.42)
    assert r.bw_overall_MiBps == pytest.approx(3.83)
    assert r.rate_avg == pytest.approx(876)
    assert r.rate_overall == pytest.approx(980)
    assert r.bw_MBps == pytest.approx(3.83 * 1048576 / 1e6)


def test_parse_ucx_final_only_and_csv() -> None:
    r = parse_ucx(UCX_GET_FINAL_ONLY)
    assert (r.iters, r.lat_p50_us, r.bw_overall_MiBps) == (300, 1919.032, 555.75)
    assert r.bw_MBps == pytest.approx(555.75 * UCX_MB / 1e6)  # 582.75 MB/s
    c = parse_ucx(UCX_PUT_LAT_CSV)
    assert (c.iters, c.lat_p50_us, c.rate_overall) == (1000, 75.485, 12960)


def test_parse_ucx_rejects_output_without_a_result() -> None:
    with pytest.raises(Exception, match="no result row"):
        parse_ucx("Waiting for connection...\n")


@pytest.mark.skipif(shutil.which("ucx_perftest") is None, reason="ucx_perftest not installed")
def test_live_ucx_perftest_output_parses() -> None:
    r = run_ucx("ucp_put_lat", 4096, 200, timeout=30)
    assert r.iters == 200
    assert _positive_finite(r.lat_p50_us)
    assert _positive_finite(r.bw_MBps)


HIGH_FD = 1100


def test_a_helper_starts_when_its_pipe_is_a_descriptor_past_1023() -> None:
    """select(2) cannot wait on a descriptor past 1,023; a test process late in a suite may
    hold that many: the helper's READY line is waited for with poll(2)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HIGH_FD + 64:
        pytest.skip(f"the descriptor limit ({hard}) is below {HIGH_FD + 64}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH_FD + 64), hard))
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(HIGH_FD)]
    try:
        with helper("serve-echo") as port:
            assert 0 < port < 65536
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
