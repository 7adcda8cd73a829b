"""``coding-agent-rl sandboxes list|gc``: find and remove leftover Docker sandboxes by label,
with what they leave on the host (volumes, capped disks: loop mounts and their files)."""

from __future__ import annotations

import argparse
import asyncio
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="list our containers (every run unless --run-id)")
    ls.add_argument("--run-id", default=None, help="only this run's")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    gc = sub.add_parser(
        "gc", help="remove our containers, volumes and capped disks (every run unless --run-id)"
    )
    gc.add_argument("--run-id", default=None, help="only this run's")


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.sandbox import docker_engine as engine

    if args.action == "gc":
        report = asyncio.run(engine.gc_report(args.run_id))
        print(
            f"removed {report['containers']} sandbox container(s), {report['volumes']} "
            f"volume(s), {report['disks']} capped disk(s)"
        )
        return 0
    for c in engine.list_containers(args.run_id):
        row = {
            "id": c["Id"][:12],
            "run": c["Labels"].get(engine.LABEL_RUN, ""),
            "image": c["Image"],
            "state": c["State"],
            "status": c["Status"],
            "created": c["Created"],
        }
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{row['id']}  {row['run']:40}  {row['state']:8}  {row['image']}")
    return 0
