"""Build the images of a dataset's rows that carry a build context (``metadata.build``).

Idempotent: each image is labelled with a hash of its Dockerfile, its build context and the ids
of the local images it starts FROM; an image whose label matches is reused without calling
``docker build``, so a second call costs one ``docker image inspect`` per image. With
``backend="local"`` the images are root filesystems in the local backend's store
(:mod:`coding_agent_rl.sandbox.rootfs`), built without any container engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import pathlib
import re
import subprocess
import tempfile
from collections.abc import Callable

from coding_agent_rl.datasets.schema import BuildSpec, load_dataset
from coding_agent_rl.images.common import ImageBuildError

log = logging.getLogger(__name__)
HASH_LABEL = "coding-agent-rl.content-hash"
SOURCE_LABEL = "coding-agent-rl.image-source"  # "dockerfile" | "repo": built by us
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE | re.MULTILINE)


def _image_id(name: str) -> str:
    r = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True
    )
    return r.stdout.strip() if r.returncode == 0 else ""


def _rootfs_id(name: str) -> str:
    from coding_agent_rl.sandbox.rootfs import find

    image = find(name)
    return image.hash if image else ""


def content_hash(spec: BuildSpec, image_id: Callable[[str], str] = _image_id) -> str:
    """Hash of the Dockerfile, every file under the context (path, exec bit, bytes) and the
    ids of the FROM images present locally (a rebuilt base image invalidates the hash)."""
    h = hashlib.sha256()
    dockerfile = spec.dockerfile.read_bytes()
    h.update(b"dockerfile\0" + dockerfile)
    for base in _FROM.findall(dockerfile.decode("utf-8", "replace")):
        h.update(f"from\0{base}\0{image_id(base)}\0".encode())
    for f in sorted(p for p in spec.context.rglob("*") if p.is_file() or p.is_symlink()):
        rel = f.relative_to(spec.context).as_posix()
        if "__pycache__" in rel.split("/") or rel.endswith(".pyc"):
            continue
        mode = "l" if f.is_symlink() else ("x" if f.stat().st_mode & 0o111 else "f")
        data = str(f.readlink()).encode() if f.is_symlink() else f.read_bytes()
        h.update(f"file\0{rel}\0{mode}\0{len(data)}\0".encode() + data)
    return h.hexdigest()[:32]


def _label(image: str, label: str = HASH_LABEL) -> str | None:
    fmt = '{{ index .Config.Labels "' + label + '" }}'
    r = subprocess.run(
        ["docker", "image", "inspect", "-f", fmt, image], capture_output=True, text=True
    )
    return r.stdout.strip() if r.returncode == 0 else None


def build_image(
    image: str,
    spec: BuildSpec,
    *,
    rebuild: bool = False,
    digest: str | None = None,
    source: str = "dockerfile",
    log_path: pathlib.Path | None = None,
    nocache: bool = False,
    append: bool = False,
) -> bool:
    """Build ``image`` from ``spec`` unless an up-to-date one exists; True when it was built.
    ``digest``: the content hash when the caller knows it (default: :func:`content_hash`);
    ``source``: how the image was made, kept in the :data:`SOURCE_LABEL` label; ``log_path``:
    where the build's whole output goes (kept; a failure's message names it); ``nocache``: no
    step from the engine's build cache; ``append``: add to the log rather than replace it."""
    from coding_agent_rl.images.docker_build import BuildFailed, docker_build

    digest = digest or content_hash(spec)
    if not rebuild and _label(image) == digest:
        log.info("%s is up to date (%s)", image, digest)
        return False
    log.info("building %s from %s", image, spec.context)
    labels = {HASH_LABEL: digest, SOURCE_LABEL: source}
    with contextlib.ExitStack() as stack:
        if log_path is None:
            sink = stack.enter_context(tempfile.TemporaryFile("w+"))
        else:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            sink = stack.enter_context(log_path.open("a" if append else "w"))
        try:
            docker_build(
                image, spec.context, spec.dockerfile, labels=labels, sink=sink, nocache=nocache
            )
        except BuildFailed as e:
            where = f"; log: {log_path}" if log_path else ""
            step = f"; failed command: {e.command}" if e.command else ""
            raise ImageBuildError(
                f"docker build of {image} failed: {e.cause}{step}{where}; reproduce: "
                f"docker build -f {spec.dockerfile} {spec.context}"
            ) from None
    return True


def build_rootfs_image(image: str, spec: BuildSpec, *, rebuild: bool = False) -> bool:
    """:func:`build_image` for the local backend: a root filesystem, no engine needed."""
    from coding_agent_rl.images import rootfs

    if rootfs.BASE_IMAGE in _FROM.findall(spec.dockerfile.read_text()):
        rootfs.build_base()  # built on first use; its id goes into the hash
    digest = content_hash(spec, image_id=_rootfs_id)
    if not rebuild and _rootfs_id(image) == digest:
        log.info("%s is up to date (%s)", image, digest)
        return False
    log.info("building %s from %s (local root filesystem)", image, spec.context)
    rootfs.build(image, spec.dockerfile, spec.context, digest)
    return True


def build_dataset_images(
    dataset_path: str | pathlib.Path, *, rebuild: bool = False, kind: str = "docker"
) -> list[str]:
    """Build (or reuse) the image of every row with a build context; returns their names.

    Rows sharing an image name must share the build context; the image is built once.
    ``kind`` (a backend's ``Sandbox.image_kind``): ``docker`` (images in the engine) or
    ``rootfs`` (root filesystems for the local backend).
    """
    if kind not in ("docker", "rootfs"):
        raise ValueError(f"images can be built as docker images or rootfs, not {kind!r}")
    build = build_image if kind == "docker" else build_rootfs_image
    specs: dict[str, BuildSpec] = {}
    for row in load_dataset(dataset_path):
        if row.build is None:
            continue
        if specs.setdefault(row.image, row.build) != row.build:
            raise ImageBuildError(f"rows name image {row.image} with different build contexts")
    for image, spec in specs.items():
        build(image, spec, rebuild=rebuild)
    return list(specs)
