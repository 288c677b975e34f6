"""``fabricctl``: drive a datfabric (the demo workload; more subcommands build on this)."""

from __future__ import annotations

import argparse
import glob
import os
import signal
import subprocess
import sys
import tempfile
import threading

from bench.nodes import add_daemon_cpus
from bench.perftest import WARMUP, at_least_one, at_least_zero
from client.faults import Faults
from fabricd import keyfile
from fabricd.launch import Node, start_node
from proto.errors import DatError
from tools import datconf, faultctl
from tools.demo import CONNECTED, DemoError, run_client, serve, table
from tools.faultctl import load_schedule

DEMO_CONN_QUAL = 45248  # dtest's server conn_qual


def build_parser() -> argparse.ArgumentParser:
    """The command line of fabricctl."""
    p = argparse.ArgumentParser(
        prog="fabricctl", description="datfabric control and workloads", allow_abbrev=False
    )
    sub = p.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="two nodes, two consumers: RDMA Write/Read and verify", allow_abbrev=False
    )
    demo.add_argument(
        "--role",
        choices=["all", "server", "client"],
        default="all",
        help="all: start a local two-node fabric and both consumers (default)",
    )
    demo.add_argument("--ia", default="datfabric", help="IA name or daemon socket (roles)")
    demo.add_argument("--peer", default="", help="HOST:PORT of the server's node (client role)")
    demo.add_argument("--conn-qual", type=int, default=DEMO_CONN_QUAL)
    demo.add_argument("--size", type=int, default=1 << 20, help="bytes per operation")
    demo.add_argument("--iters", type=int, default=200)
    demo.add_argument("--window", type=int, default=16, help="outstanding operations")
    demo.add_argument(
        "--faults",
        default="",
        metavar="SCHEDULE",
        help="run a fault schedule (JSON or YAML) while the demo runs",
    )
    bench = sub.add_parser(
        "bench",
        allow_abbrev=False,
        help="perftest-style bandwidth and latency (ib_*_bw / ib_*_lat)",
    )
    bench.add_argument(
        "--op",
        choices=["write", "read", "send", "connect", "scale"],
        default="write",
        help="connect: setup rate; scale: --iters EP pairs",
    )
    bench.add_argument("--mode", choices=["bw", "lat"], default="bw")
    bench.add_argument("--size", type=int, default=65536, help="bytes per operation")
    bench.add_argument("--all", action="store_true", help="every power of two, 2 B to 8 MiB")
    bench.add_argument("--iters", type=int, default=0, help="iterations per size")
    bench.add_argument("--window", type=int, default=16, help="outstanding operations (bw)")
    bench.add_argument("--same-node", action="store_true", help="both endpoints on one daemon")
    bench.add_argument(
        "--poll", action="store_true", help="take completions with dequeue in a loop (no wait)"
    )
    bench.add_argument(
        "--cq-mod",
        type=at_least_one,
        default=1,
        metavar="N",
        help="perftest's CQ moderation: one operation in N signalled (at most the window)",
    )
    bench.add_argument(
        "--warmup",
        type=at_least_zero,
        default=None,
        metavar="N",
        help=f"operations run untimed before each size (default: --iters, at most {WARMUP},"
        " ucx_perftest's -w)",
    )
    add_daemon_cpus(bench, "the daemons this run starts")
    bench.add_argument("--json", action="store_true", help="one JSON object per size")
    bench.add_argument("--verify", action="store_true", help="check the bytes after each size")
    bench.add_argument("--no-limits", action="store_true", help="skip the machine limits")
    bench.add_argument("--limit-seconds", type=float, default=1.0)
    bench.add_argument("--initiator", default="", help="socket of a running node (else local)")
    bench.add_argument("--target", default="", help="socket of the target's running node")
    bench.add_argument("--target-address", default="", help="HOST:PORT of the target's node")
    key = sub.add_parser(
        "cluster-key",
        allow_abbrev=False,
        help="write a new cluster key file (fabricd --cluster-key): 32 random bytes, owner-only",
    )
    key.add_argument("file", help="where to write it (an existing file is never replaced)")
    faultctl.add_parsers(sub)
    datconf.add_parser(sub)
    return p


def _role_argv(args: argparse.Namespace, role: str, ia: str, peer: str = "") -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "tools.ctl",
        "demo",
        "--role",
        role,
        "--ia",
        ia,
        "--conn-qual",
        str(args.conn_qual),
        "--size",
        str(args.size),
        "--iters",
        str(args.iters),
        "--window",
        str(args.window),
    ]
    return argv + (["--peer", peer] if peer else [])


def _run_schedule(path: str, nodes: list[Node], stop: threading.Event) -> None:
    """Run a fault schedule until it ends or the workload does; then print the fault log."""
    with Faults({n.name: n.socket for n in nodes}) as faults:
        faults.run_schedule(load_schedule(path), stop)
        for line in faults.log():
            print(f"fault: {line}", flush=True)


def _until_connected(client: subprocess.Popen[str]) -> str:
    """Read the demo client's output up to its CONNECTED line (or its end); returns it."""
    assert client.stdout is not None
    lines = []
    for line in client.stdout:
        if line.strip() == CONNECTED:
            break
        lines.append(line)
    return "".join(lines)


def demo_all(args: argparse.Namespace) -> int:
    """Start two nodes on loopback and a consumer process on each; report and clean up."""
    with tempfile.TemporaryDirectory(prefix="datfabric-demo-") as tmp:
        nodes: list[Node] = []
        try:
            for name in ("node-a", "node-b"):
                nodes.append(start_node(name, os.path.join(tmp, f"{name}.sock")))
            a, b = nodes
            print(f"fabric: {a.name} at {a.host}:{a.port}, {b.name} at {b.host}:{b.port}")
            server = subprocess.Popen(
                _role_argv(args, "server", b.socket),
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            client = subprocess.Popen(
                _role_argv(args, "client", a.socket, f"{b.host}:{b.port}"),
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            stop = threading.Event()
            schedule = threading.Thread(target=_run_schedule, args=(args.faults, nodes, stop))
            early = ""
            if args.faults:  # its phases count from the moment the client is connected
                early = _until_connected(client)
                schedule.start()
            c_out, c_err = client.communicate(timeout=300)
            c_out = early + c_out.replace(f"{CONNECTED}\n", "", 1)
            stop.set()
            if args.faults:
                schedule.join(60)
            s_out, s_err = server.communicate(timeout=60)
            sys.stdout.write(c_out + s_out)
            sys.stderr.write(c_err + s_err)
            pids = (client.pid, server.pid)
        finally:
            codes = [node.stop() for node in nodes]
        leftovers = [p for pid in pids for p in glob.glob(f"/dev/shm/datfabric-{pid}-*")]
        if leftovers:
            print(f"demo failed: shared memory left behind: {leftovers}", file=sys.stderr)
            return 1
        if client.returncode or server.returncode or any(codes):
            print(
                f"demo failed: client exit {client.returncode}, server exit "
                f"{server.returncode}, daemons {codes}",
                file=sys.stderr,
            )
            return 1
        print("demo passed: every byte verified by RDMA Read and by the server")
        return 0


def demo(args: argparse.Namespace) -> int:
    """``fabricctl demo``."""
    try:
        if args.role == "server":
            ok = serve(args.ia, args.conn_qual, args.size)
            print("server: memory verified" if ok else "server: memory differs")
            return 0 if ok else 1
        if args.role == "client":
            if not args.peer:
                print("demo failed: --peer HOST:PORT is needed for the client", file=sys.stderr)
                return 2
            rows = run_client(
                args.ia, args.peer, args.conn_qual, args.size, args.iters, args.window
            )
            print(table(rows))
            return 0
        return demo_all(args)
    except (DemoError, DatError) as err:
        print(f"demo failed ({args.role}): {err}", file=sys.stderr)
        return 1


def cluster_key(path: str) -> int:
    """``fabricctl cluster-key FILE``: copy the file to every node, give it to fabricd."""
    try:
        keyfile.generate(path)
    except OSError as err:
        print(f"cluster-key: {path}: {err.strerror}", file=sys.stderr)
        return 1
    print(f"wrote a new cluster key to {path}: give every node of the fabric --cluster-key")
    return 0


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``fabricctl`` console script."""
    args = build_parser().parse_args(argv)
    if args.command in ("demo", "bench"):
        # a TERM ends the run as an interrupt would: the nodes it started stop with it
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.command == "demo":
        sys.exit(demo(args))
    if args.command == "bench":
        from bench.fabric import main as bench_main

        sys.exit(bench_main(args))
    if args.command == "dat-conf":
        sys.exit(datconf.main(args))
    if args.command == "cluster-key":
        sys.exit(cluster_key(args.file))
    try:
        sys.exit(faultctl.run(args))
    except BrokenPipeError:  # the output went to a pipe that closed (| head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


if __name__ == "__main__":
    main()
