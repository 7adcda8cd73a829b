"""``coding-agent-rl images base|build``: build images locally (no registry needed)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    base = sub.add_parser("base", help="build coding-agent-rl/base:latest (debootstrap + import)")
    base.add_argument("--rebuild", action="store_true", help="rebuild even if it exists")
    base.add_argument(
        "--from",
        dest="from_image",
        metavar="IMAGE",
        help="build FROM a registry image instead of debootstrap",
    )
    base.add_argument(
        "--name", default=None, help="image name (default coding-agent-rl/base:latest)"
    )
    build = sub.add_parser("build", help="build the task images a dataset declares")
    build.add_argument("--dataset", required=True, metavar="FILE", help="dataset (jsonl)")
    build.add_argument("--rebuild", action="store_true", help="rebuild even if they exist")


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.cli import UserError
    from coding_agent_rl.sandbox.images import BASE_IMAGE, ImageBuildError, build_base_image

    try:
        if args.action == "base":
            print(
                build_base_image(
                    args.name or BASE_IMAGE, rebuild=args.rebuild, from_image=args.from_image
                )
            )
        else:
            from coding_agent_rl.datasets.images import build_dataset_images

            for name in build_dataset_images(args.dataset, rebuild=args.rebuild):
                print(name)
    except (ImageBuildError, FileNotFoundError) as e:
        raise UserError(str(e)) from e
    return 0
