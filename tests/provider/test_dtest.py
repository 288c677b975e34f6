"""Debian's dtest and dtestcm (dapl2-utils), unmodified, between two daemons over libdatfabric.

The two nodes listen on one port at two addresses (127.0.0.1 and 127.0.0.2, or two network
namespaces): dtest's client resolves the server's host name with no port, and the provider
takes its own node's port for it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import StartNode
from tests.integration import netns
from tests.provider.support import envs_for, loopback_pair, run_pair

pytestmark = pytest.mark.skipif(
    shutil.which("dtest") is None or shutil.which("dtestcm") is None,
    reason="dtest and dtestcm (Debian's dapl2-utils) are not installed",
)

DTEST_READY = "waiting for client connection"  # dtest's server sends its address over TCP


@pytest.mark.parametrize("options", [[], ["-p"], ["-B", "1"], ["-B", "50", "-b", "4096"]], ids=str)
def test_dtest_on_loopback(
    build: Path, start: StartNode, tmp_path: Path, options: list[str]
) -> None:
    """dtest's whole lifecycle (private data, RMR exchange, RDMA Write, Read, ping-pong,
    disconnect) passes on both sides, blocking and polling, with several burst sizes."""
    with loopback_pair(start, tmp_path) as (a, b, server_host):
        envs = envs_for(tmp_path, build, a, b)
        srv, cli = run_pair(
            ["dtest", "-P", "df", "-s", *options],
            ["dtest", "-P", "df", "-h", server_host, *options],
            (envs[0], envs[1]),
            DTEST_READY,
        )
    for out in (srv, cli):
        assert "DAPL Test Complete. PASSED" in out, out


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
def test_dtest_across_network_namespaces(build: Path, start: StartNode, tmp_path: Path) -> None:
    """The same across two hosts (network namespaces joined by a veth pair)."""
    with netns.two_hosts(7) as hosts:
        port = 47000
        a = start("ns-a", host=hosts.addr[0], port=port, netns=hosts.ns[0])
        b = start("ns-b", host=hosts.addr[1], port=port, netns=hosts.ns[1])
        envs = envs_for(tmp_path, build, a, b)
        exec_in = [["ip", "netns", "exec", ns] for ns in hosts.ns]
        srv, cli = run_pair(
            [*exec_in[0], "dtest", "-P", "df", "-s"],
            [*exec_in[1], "dtest", "-P", "df", "-h", hosts.addr[0]],
            (envs[0], envs[1]),
            DTEST_READY,
        )
    for out in (srv, cli):
        assert "DAPL Test Complete. PASSED" in out, out


def test_dtestcm_connections(build: Path, start: StartNode, tmp_path: Path) -> None:
    """dtestcm connects and disconnects many endpoints; its CPS figure is printed. The client
    starts once the server's PSP listens (dtestcm's stdout is a pipe here: line-buffered by
    stdbuf, or its ready line would come at exit; both sides create 1000 EPs first, and a
    client connecting before the PSP exists would see NON_PEER_REJECTED)."""
    count = "1000"
    with loopback_pair(start, tmp_path) as (a, b, server_host):
        envs = envs_for(tmp_path, build, a, b)
        srv, cli = run_pair(
            ["stdbuf", "-oL", "dtestcm", "-P", "df", "-s", "-c", count],
            ["dtestcm", "-P", "df", "-h", server_host, "-c", count],
            (envs[0], envs[1]),
            "Server ready on port",
        )
    assert f"ALL {count} CONNECTED on Server" in srv, srv
    assert f"ALL {count} CONNECTED on Client" in cli, cli
    cps = re.search(r"CPS\s*[=:]?\s*([\d.]+)", cli)
    assert cps, cli
    print(f"dtestcm -c {count}: {cps.group(0)}")


def test_dtest_with_the_sanitized_provider(build: Path, start: StartNode, tmp_path: Path) -> None:
    """dtest on the provider built with AddressSanitizer and UndefinedBehaviorSanitizer (the
    runtimes preloaded into Debian's uninstrumented dtest): both sides pass, nothing is
    reported."""
    runtimes = [
        subprocess.run(
            ["cc", f"-print-file-name={lib}"], capture_output=True, text=True
        ).stdout.strip()
        for lib in ("libasan.so", "libubsan.so")
    ]
    if not all(os.path.isabs(path) for path in runtimes):
        pytest.skip("the compiler has no sanitizer runtimes to preload")
    with loopback_pair(start, tmp_path) as (a, b, server_host):
        envs = [
            {**env, "LD_PRELOAD": " ".join(runtimes), "ASAN_OPTIONS": "detect_leaks=0"}
            for env in envs_for(tmp_path, build / "asan", a, b)
        ]
        srv, cli = run_pair(
            ["dtest", "-P", "df", "-s"],
            ["dtest", "-P", "df", "-h", server_host],
            (envs[0], envs[1]),
            DTEST_READY,
        )
    for out in (srv, cli):
        assert "DAPL Test Complete. PASSED" in out, out
        assert "Sanitizer" not in out and "runtime error" not in out, out


@pytest.mark.skipif(shutil.which("dtestx") is None, reason="dtestx is not installed")
def test_dtestx_immediate_data_and_atomics(build: Path, start: StartNode, tmp_path: Path) -> None:
    """Debian's dtestx, unmodified: RDMA Write with immediate data both ways, compare-and-swap
    (the server's compare misses, the client's swaps) and two fetch-and-adds each way, every
    result checked by dtestx itself on both sides. The client starts once the server has sent
    its address over dtestx's own TCP port (stdbuf: dtestx's stdout is a pipe here)."""
    with loopback_pair(start, tmp_path) as (a, b, server_host):
        envs = envs_for(tmp_path, build, a, b)
        srv, cli = run_pair(
            ["stdbuf", "-oL", "dtestx", "-P", "df", "-s"],
            ["dtestx", "-P", "df", "-h", server_host],
            (envs[0], envs[1]),
            "waiting to snd addr",
        )
    for out in (srv, cli):
        for test in ("RDMA_WRITE_WITH_IMMEDIATE_DATA", "CMP_SWAP", "FETCH_ADD"):
            assert f"{test} test - PASSED" in out, out
        assert "IB extension test - immed/atomic test PASSED" in out, out


@pytest.mark.skipif(shutil.which("dtestsrq") is None, reason="dtestsrq is not installed")
@pytest.mark.parametrize("options", [[], ["-c", "4", "-B", "8", "-t", "10"]], ids=str)
def test_dtestsrq_shared_receive_queue(
    build: Path, start: StartNode, tmp_path: Path, options: list[str]
) -> None:
    """Debian's dtestsrq, unmodified: on each side one SRQ serves every EP (made by
    dat_ep_create_with_srq; its buffers sized by DAT_IB_TRANSPORT_MTU), bursts of Sends land in
    the other side's SRQ and are answered, both sides disconnect (EP_BROKEN on the async EVD for
    each EP of an SRQ) and free everything. dtestsrq exits 0 whatever happened: its closing line
    is the verdict. The client starts once the server's PSP listens (stdbuf: dtestsrq's stdout
    is a pipe here; nothing drains it until the client exits, so no -v)."""
    with loopback_pair(start, tmp_path) as (a, b, server_host):
        envs = envs_for(tmp_path, build, a, b)
        srv, cli = run_pair(
            ["stdbuf", "-oL", "dtestsrq", "-P", "df", "-s", *options],
            ["dtestsrq", "-P", "df", "-h", server_host, *options],
            (envs[0], envs[1]),
            " server ready on port",
        )
    for out in (srv, cli):
        assert "DAPL RC SRQ Test Complete." in out, out
        assert "Err" not in out and "ERR" not in out, out  # what it tolerates, it still prints
