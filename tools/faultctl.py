"""``fabricctl fault|partition|heal|node``: fault injection from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from client.faults import Faults, parse_nodes
from proto.faultrules import ACTIONS, OPS, replay_rules

NODES_HELP = "name=socket,... of the fabric's nodes (default: $DATFABRIC_NODES)"


def load_schedule(path: str) -> dict[str, Any]:
    """A schedule file: JSON, or YAML when PyYAML is installed."""
    with open(path) as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        import yaml

        data: dict[str, Any] = yaml.safe_load(text)
        return data
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def add_parsers(sub: Any) -> None:
    """The fault subcommands of fabricctl."""
    for name, helptext in (
        ("fault", "fault rules: add, list, remove, clear, log, replay, schedule"),
        ("partition", "cut the links between groups: A,B/C"),
        ("heal", "remove every fault rule on every node"),
        ("node", "pause, resume or crash a node"),
    ):
        p = sub.add_parser(name, help=helptext, allow_abbrev=False)
        p.add_argument("--nodes", default=os.environ.get("DATFABRIC_NODES", ""), help=NODES_HELP)
        if name == "fault":
            verbs = p.add_subparsers(dest="verb", required=True)
            add = verbs.add_parser("add", help="install a rule on its source node")
            add.add_argument("--name", default=None)
            add.add_argument("--action", required=True, choices=sorted(ACTIONS))
            add.add_argument("--op", default="ANY", choices=sorted(OPS))
            add.add_argument("--src", default=None, help="node the messages leave")
            add.add_argument("--dst", default=None, help="node they go to")
            add.add_argument("--probability", type=float, default=1.0)
            add.add_argument("--count", type=int, default=None, help="fire at most N times")
            add.add_argument("--nth", type=int, default=None, help="only the Nth match")
            add.add_argument("--size-min", type=int, default=0)
            add.add_argument("--size-max", type=int, default=None)
            add.add_argument("--rmr-context", type=lambda v: int(v, 0), default=None)
            add.add_argument("--delay-ms", type=float, default=0.0)
            add.add_argument("--jitter-ms", type=float, default=0.0)
            add.add_argument("--status", type=int, default=8, help="for --action status")
            add.add_argument("--silent", action="store_true", help="corrupt: let it land")
            add.add_argument(
                "--part",
                choices=["payload", "header"],
                default="payload",
                help="corrupt: which part of the message",
            )
            add.add_argument(
                "--start-s",
                type=float,
                default=0.0,
                help="time window: from this many seconds after install",
            )
            add.add_argument("--end-s", type=float, default=None, help="... until this many")
            add.add_argument("--seed", type=int, default=None)
            verbs.add_parser("list", help="the rules of every node and how often they fired")
            rm = verbs.add_parser("remove", help="remove a rule by name")
            rm.add_argument("rule")
            verbs.add_parser("clear", help="remove every rule (verified: zero left)")
            lg = verbs.add_parser("log", help="the fault log, JSON lines")
            lg.add_argument("--clear", action="store_true")
            rp = verbs.add_parser("replay", help="install rules that re-fire a fault log")
            rp.add_argument("log")
            sc = verbs.add_parser("schedule", help="run a schedule file (JSON or YAML)")
            sc.add_argument("file")
        elif name == "partition":
            p.add_argument("groups", help="groups of node names: A,B/C")
            p.add_argument("--mode", choices=["blackhole", "reset"], default="blackhole")
            p.add_argument("--one-way", action="store_true", help="only from the first group")
        elif name == "node":
            p.add_argument("verb", choices=["pause", "resume", "crash", "status"])
            p.add_argument("name")


def run(args: argparse.Namespace) -> int:
    """Carry out a fault subcommand."""
    nodes = parse_nodes(args.nodes)
    if not nodes:
        print(
            "fabricctl: name the nodes with --nodes name=socket,... or DATFABRIC_NODES",
            file=sys.stderr,
        )
        return 2
    with Faults(nodes) as faults:
        if args.command == "heal":
            left = faults.heal()
            print(f"healed: {left} rules left")
            return 0 if left == 0 else 1
        if args.command == "partition":
            groups = [g.split(",") for g in args.groups.split("/")]
            faults.partition(groups, mode=args.mode, one_way=args.one_way)
            print(f"partitioned {' | '.join(','.join(g) for g in groups)} ({args.mode})")
            return 0
        if args.command == "node":
            if args.verb == "status":
                print(json.dumps(faults.status(args.name)))
            else:
                getattr(faults, args.verb)(args.name)
                print(f"{args.name}: {args.verb}")
            return 0
        return _fault(faults, args)


def _fault(faults: Faults, args: argparse.Namespace) -> int:
    verb = args.verb
    if verb == "add":
        match = {
            k: getattr(args, k)
            for k in (
                "op",
                "src",
                "dst",
                "probability",
                "count",
                "nth",
                "size_min",
                "size_max",
                "rmr_context",
                "delay_ms",
                "jitter_ms",
                "status",
                "silent",
                "part",
                "start_s",
                "end_s",
            )
        }
        if args.name:
            match["name"] = args.name
        name = faults.add(args.action, seed=args.seed, **match)
        print(f"added {name}")
    elif verb == "list":
        for node, rules in faults.rules().items():
            for rule in rules:
                print(f"{node}: {json.dumps(rule)}")
    elif verb == "remove":
        faults.remove(args.rule)
        print(f"removed {args.rule}")
    elif verb == "clear":
        left = faults.clear()
        print(f"cleared: {left} rules left")
        return 0 if left == 0 else 1
    elif verb == "log":
        for line in faults.log(clear=args.clear):
            print(line)
    elif verb == "replay":
        with open(args.log) as f:
            replayed = replay_rules([line for line in f.read().splitlines() if line.strip()])
        faults.install([r.to_json() for r in replayed])
        print(f"installed {len(replayed)} replay rules")
    elif verb == "schedule":
        schedule = load_schedule(args.file)
        faults.run_schedule(schedule)
        print(f"schedule done: {len(schedule['phases'])} phases, healed")
    return 0
