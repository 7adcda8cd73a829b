"""``coding-agent-rl images base|build``: build images locally (no registry needed).

``images build --dataset FILE`` provides every row's image: built from the row's Dockerfile
context, used as is when the engine has it, pulled with ``--pull``, or built from the
repository's git source with ``--repo-source TEMPLATE`` (see images/provision.py). It prints
one summary line per image and exits 1 when an image is missing or failed; a failed build's
line names the root cause, the log (``<dataset stem>.build-logs/<image>.log`` beside the
dataset) and the command that reproduces it.

``--backend`` names any registered sandbox backend; what it builds is the backend's
``image_kind``: Docker images (docker), or the root filesystems the local (bubblewrap) backend
runs, with no container engine at all (rows with a build context only).
"""

from __future__ import annotations

import argparse
import json
import pathlib

from coding_agent_rl.errors import UserError
from coding_agent_rl.sandbox import BACKENDS


def image_kind(backend: str) -> str:
    """What ``backend`` runs (``docker`` | ``rootfs``); a backend with none is a user error."""
    kind = BACKENDS.load(backend).image_kind
    if kind is None:
        raise UserError(f"the {backend} backend builds its images itself (nothing to build here)")
    return str(kind)


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
    base.add_argument("--backend", choices=BACKENDS.names(), default="docker")
    build = sub.add_parser("build", help="provide the images a dataset's rows name")
    build.add_argument("--dataset", required=True, metavar="FILE", help="dataset (jsonl)")
    build.add_argument("--rebuild", action="store_true", help="rebuild even if they exist")
    build.add_argument("--backend", choices=BACKENDS.names(), default="docker")
    build.add_argument(
        "--pull", action="store_true", help="pull images the engine lacks from their registry"
    )
    build.add_argument(
        "--repo-source",
        metavar="TEMPLATE",
        help="build images the engine lacks from the rows' repositories: a URL or path with "
        "{repo}, {owner}, {name}, e.g. 'https://github.com/{repo}.git'",
    )
    build.add_argument(
        "--base", default=None, metavar="IMAGE", help="base image for --repo-source builds"
    )
    build.add_argument("--concurrency", type=int, default=2, help="images built at once")
    build.add_argument(
        "--explain",
        action="store_true",
        help="after each image built from its repository: every package installed, its version "
        "and the declaration it came from, what was dropped and why",
    )


def _build(args: argparse.Namespace) -> int:
    from coding_agent_rl.datasets.schema import DatasetError, load_dataset
    from coding_agent_rl.images.common import BASE_IMAGE
    from coding_agent_rl.images.provision import provide_images
    from coding_agent_rl.images.repo import log_dir_for

    if args.concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    if image_kind(args.backend) == "rootfs":
        if args.pull or args.repo_source:
            raise UserError("--pull and --repo-source need a backend of Docker images")
        from coding_agent_rl.images.dataset import build_dataset_images

        for name in build_dataset_images(args.dataset, rebuild=args.rebuild, kind="rootfs"):
            print(name)
        return 0
    try:
        rows = load_dataset(args.dataset)
    except DatasetError as e:
        raise UserError(str(e)) from None
    reports = provide_images(
        rows,
        pull_missing=args.pull,
        repo_source=args.repo_source,
        rebuild=args.rebuild,
        concurrency=args.concurrency,
        base_image=args.base or BASE_IMAGE,
        log_dir=log_dir_for(args.dataset),
    )
    for r in reports:
        print(r.line())
        if args.explain and r.ok:
            print(explain(r.image, log_dir_for(args.dataset)))
    bad = [r for r in reports if not r.ok]
    print(f"{len(reports) - len(bad)}/{len(reports)} images ready")
    return 1 if bad else 0


def explain(image: str, log_dir: pathlib.Path) -> str:
    """The environment record written beside ``image``'s build log, as indented lines."""
    from coding_agent_rl.images.repo import record_path_for

    path = record_path_for(image, log_dir)
    if not path.is_file():
        return f"  no environment record at {path} (not built here: --rebuild writes one)"
    data = json.loads(path.read_text())
    lines = [f"  declarations: {', '.join(data['sources']) or 'none'} ({data['recipe']} recipe)"]
    lines += [f"  built from sdist: {s}" for s in data["built_from_sdist"]]
    lines += [f"  dropped {d['name']} ({d['source']}): {d['why']}" for d in data["dropped"]]
    lines += [f"  note: {n}" for n in data["notes"]]
    lines += [
        f"  {p['name']}=={p['version']}  <- {'; '.join(p['from'])}" for p in data["installed"]
    ]
    return "\n".join([*lines, f"  record: {path}"])


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.images.base import build_base_image
    from coding_agent_rl.images.common import BASE_IMAGE, ImageBuildError

    try:
        if args.action == "base" and image_kind(args.backend) == "rootfs":
            if args.from_image:
                raise UserError("--from needs a backend of Docker images")
            from coding_agent_rl.images.rootfs import build_base

            print(build_base(args.name or BASE_IMAGE, rebuild=args.rebuild).root)
        elif args.action == "base":
            print(
                build_base_image(
                    args.name or BASE_IMAGE, rebuild=args.rebuild, from_image=args.from_image
                )
            )
        else:
            return _build(args)
    except (ImageBuildError, FileNotFoundError) as e:
        raise UserError(str(e)) from e
    return 0
