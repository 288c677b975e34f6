"""``fabricd``: run one node of the fabric."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import signal
import sys

import uvloop

from fabricd import keyfile, runtime
from fabricd.server import Daemon
from fabricd.sockdir import UnsafeSocketDir
from proto.limits import NAMES
from proto.limits import parse as parse_limits

DEFAULT_PORT = 7471
log = logging.getLogger("fabricd")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``, or ``HOST``) to a (host, port) pair."""
    host, _, port = text.rpartition(":") if ":" in text else (text, "", str(DEFAULT_PORT))
    return host or "0.0.0.0", int(port)


def build_parser() -> argparse.ArgumentParser:
    """The command line of fabricd."""
    p = argparse.ArgumentParser(
        prog="fabricd", description="datfabric node daemon (the NIC)", allow_abbrev=False
    )
    p.add_argument("--name", default="node", help="node name, reported by dat_ia_query")
    p.add_argument(
        "--listen",
        default=f"0.0.0.0:{DEFAULT_PORT}",
        type=parse_listen,
        help="HOST:PORT for peer daemons (port 0 picks a free one)",
    )
    p.add_argument(
        "--advertise",
        default="",
        help="the address dat_ia_query and peers are given (default: the listen host, or for "
        "0.0.0.0 the address of this host's name)",
    )
    p.add_argument(
        "--socket",
        default="/tmp/datfabric/fabricd.sock",
        help="unix socket path for local consumers (admin calls: the same path + .admin); its "
        "directory is created owner-only, or refused if another user owns or may write it",
    )
    p.add_argument(
        "--socket-group",
        default=None,
        help="a group whose members may also connect as consumers (the admin socket stays "
        "owner-only)",
    )
    key = p.add_mutually_exclusive_group()
    key.add_argument(
        "--cluster-key",
        metavar="FILE",
        help="the key every node of this fabric holds: peers prove it to each other before "
        "anything else (fabricctl cluster-key FILE makes one)",
    )
    key.add_argument(
        "--no-cluster-key",
        action="store_true",
        help="run without one (a warning is logged): any program that reaches --listen may "
        "then connect to listeners and, knowing an rmr_context, reach registered memory",
    )
    p.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=N",
        help=f"a limit other than its default (repeatable; docs/security.md): {', '.join(NAMES)}",
    )
    p.add_argument("--seed", type=int, default=None, help="seed for keys (replayable runs)")
    p.add_argument(
        "--coherency",
        choices=["coherent", "noncoherent"],
        default="coherent",
        help="noncoherent: RDMA reaches an I/O view that only dat_lmr_sync_* "
        "reconciles with the CPU's (lmr_sync_req is then set)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=1.0,
        help="seconds between heartbeats on a quiet peer stream",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=3.0,
        help="seconds of silence after which a peer stream counts as cut",
    )
    p.add_argument(
        "--sched",
        choices=sorted(runtime.SCHEDULING),
        default=os.environ.get("DATFABRIC_SCHED") or "batch",
        help="the daemon's scheduling policy: batch (SCHED_BATCH: a woken daemon does not"
        " preempt the consumer that rang it; the default, or DATFABRIC_SCHED) or normal",
    )
    p.add_argument(
        "--cpus",
        default=os.environ.get("DATFABRIC_CPUS") or "",
        metavar="LIST",
        help="run on these CPUs only (a list as taskset's: 1, 0,2, 0-3; or DATFABRIC_CPUS);"
        " default: wherever the kernel places it",
    )
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    return p


def cluster_key(args: argparse.Namespace) -> bytes | None:
    """The key from --cluster-key; None with --no-cluster-key (warned); neither is refused."""
    if args.no_cluster_key:
        log.warning(
            "running without a cluster key (--no-cluster-key): peers are not authenticated; "
            "anyone who reaches the peer port may connect to listeners"
        )
        return None
    if not args.cluster_key:
        raise SystemExit(
            f"fabricd {args.name}: refusing to start: peers are authenticated with a cluster "
            "key: give --cluster-key FILE (fabricctl cluster-key FILE makes one), or "
            "--no-cluster-key to run without"
        )
    try:
        return keyfile.load(args.cluster_key)
    except keyfile.BadKeyFile as err:
        raise SystemExit(f"fabricd {args.name}: refusing to start: {err}") from None


async def run(args: argparse.Namespace) -> None:
    """Start the daemon, print one ready line, and serve until SIGTERM or SIGINT."""
    key = cluster_key(args)
    try:
        limits = parse_limits(args.limit)
    except ValueError as err:
        raise SystemExit(f"fabricd {args.name}: {err}") from None
    host, port = args.listen
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one socket per connected EP
    daemon = Daemon(
        args.name,
        host,
        port,
        args.socket,
        seed=args.seed,
        coherent=args.coherency == "coherent",
        heartbeat=(args.heartbeat_interval, args.heartbeat_timeout),
        advertise=args.advertise,
        socket_group=args.socket_group,
        cluster_key=key,
        limits=limits,
    )
    try:
        await daemon.start()
    except UnsafeSocketDir as err:
        raise SystemExit(f"fabricd {args.name}: refusing to start: {err}") from None
    print(
        f"fabricd {args.name} ready peer={daemon.host}:{daemon.port} socket={args.socket}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await daemon.close()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``fabricd`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.sched not in runtime.SCHEDULING:  # argparse checks what was given, not a default
        parser.error(f"DATFABRIC_SCHED={args.sched}: use one of {', '.join(runtime.SCHEDULING)}")
    try:
        cpus = runtime.cpu_list(args.cpus) if args.cpus else None
    except ValueError as err:
        parser.error(f"--cpus (or DATFABRIC_CPUS): {err}")
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s fabricd[{args.name}] %(levelname)s %(message)s",
    )
    runtime.plain_enum_access()
    for refused in (runtime.scheduling(args.sched), runtime.pin(cpus) if cpus else None):
        if refused:
            logging.getLogger("fabricd").warning("%s: the daemon runs as it was started", refused)
    uvloop.run(run(args))


if __name__ == "__main__":
    main()
