"""``coding-agent-rl sandboxes list|gc``: find and remove leftover Docker sandboxes by label,
with what they leave on the host (volumes, capped disks: loop mounts and their files).

``list`` shows each sandbox's owner process (``host:pid``) and whether it is alive, gone (an
orphan) or on another host (unknown here); ``gc --orphans`` removes only the orphans, as every
runtime start does (:mod:`coding_agent_rl.sandbox.owner`)."""

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
    which = gc.add_mutually_exclusive_group()
    which.add_argument("--run-id", default=None, help="only this run's")
    which.add_argument(
        "--orphans",
        action="store_true",
        help="only sandboxes whose owner process on this host is gone (what a run start does)",
    )


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.sandbox import docker_engine as engine
    from coding_agent_rl.sandbox.owner import Owner

    if args.action == "gc":
        if args.orphans:
            report = asyncio.run(engine.reap_report())
        else:
            report = asyncio.run(engine.gc_report(args.run_id))
        print(
            f"removed {report['containers']} sandbox container(s), {report['volumes']} "
            f"volume(s), {report['disks']} capped disk(s), {report['snapshots']} snapshot "
            "image(s)"
        )
        return 0
    for c in engine.list_containers(args.run_id):
        found = Owner.from_labels(c["Labels"])
        row = {
            "id": c["Id"][:12],
            "run": c["Labels"].get(engine.LABEL_RUN, ""),
            "owner": found.describe() if found else "",
            "owner_state": found.state() if found else "unknown",
            "image": c["Image"],
            "state": c["State"],
            "status": c["Status"],
            "created": c["Created"],
        }
        if args.json:
            print(json.dumps(row))
        else:
            owned = f"{row['owner'] or '-'} ({row['owner_state']})"
            print(f"{row['id']}  {row['run']:40}  {owned:32}  {row['state']:8}  {row['image']}")
    return 0
