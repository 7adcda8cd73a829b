"""``coding-agent-rl images base|build``: build images locally (no registry needed).

``--backend docker`` (the default) builds Docker images; ``--backend local`` builds the root
filesystems the local (bubblewrap) backend runs, with no container engine at all.
"""

from __future__ import annotations

import argparse

BACKENDS = ("docker", "local")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    base = sub.add_parser("base", help="build coding-agent-rl/base:latest (debootstrap + import)")
    base.add_argument("--rebuild", action="store_true", help="rebuild even if it exists")
    base.add_argument(
        "--from",
        dest="from_image",
        metavar="IMAGE",
        help="build FROM a registry image instead of debootstrap (docker only)",
    )
    base.add_argument(
        "--name", default=None, help="image name (default coding-agent-rl/base:latest)"
    )
    base.add_argument("--backend", choices=BACKENDS, default="docker")
    build = sub.add_parser("build", help="build the task images a dataset declares")
    build.add_argument("--dataset", required=True, metavar="FILE", help="dataset (jsonl)")
    build.add_argument("--rebuild", action="store_true", help="rebuild even if they exist")
    build.add_argument("--backend", choices=BACKENDS, default="docker")


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.cli import UserError
    from coding_agent_rl.sandbox.images import BASE_IMAGE, ImageBuildError, build_base_image

    try:
        if args.action == "base" and args.backend == "local":
            if args.from_image:
                raise UserError("--from needs --backend docker")
            from coding_agent_rl.sandbox.rootfs import build_base

            print(build_base(args.name or BASE_IMAGE, rebuild=args.rebuild).root)
        elif args.action == "base":
            print(
                build_base_image(
                    args.name or BASE_IMAGE, rebuild=args.rebuild, from_image=args.from_image
                )
            )
        else:
            from coding_agent_rl.datasets.images import build_dataset_images

            for name in build_dataset_images(
                args.dataset, rebuild=args.rebuild, backend=args.backend
            ):
                print(name)
    except (ImageBuildError, FileNotFoundError) as e:
        raise UserError(str(e)) from e
    return 0
