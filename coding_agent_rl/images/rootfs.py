"""Building the local (bubblewrap) backend's container images: unpacked root filesystems in its
store (:mod:`coding_agent_rl.sandbox.rootfs`).

The base image comes from debootstrap; task images from a subset of the Dockerfile language
(``FROM``, ``COPY``/``ADD``, ``WORKDIR``, ``ENV``, ``ARG``, ``RUN``). Layout and the supported
subset: docs/modules/images.md.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import pathlib
import posixpath
import re
import shlex
import shutil
import subprocess
import tempfile
import uuid

from coding_agent_rl.images.common import (
    BASE_IMAGE,
    BASE_PACKAGES,
    ImageBuildError,
    apt_mirror,
)
from coding_agent_rl.sandbox.rootfs import LocalImage, find, image_dir, store

log = logging.getLogger(__name__)

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CONTEXT = "/run/coding-agent-rl-context"  # the build context, while a COPY runs
_IGNORED = {"LABEL", "CMD", "ENTRYPOINT", "EXPOSE", "VOLUME", "STOPSIGNAL", "HEALTHCHECK"}
# Cut from the base: apt caches and docs are not needed in a sandbox.
_LEAN = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man")


def _run(cmd: list[str], what: str, **kw: object) -> None:
    log.info("+ %s", " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if r.returncode != 0:
        raise ImageBuildError(f"{what} failed (exit {r.returncode}): {r.stderr[-2000:]}")


def _publish(name: str, build: pathlib.Path, meta: dict[str, object]) -> LocalImage:
    """Move the finished ``build`` folder into place; a half-built image is never visible."""
    (build / "image.json").write_text(json.dumps({"name": name, **meta}, indent=1) + "\n")
    final = image_dir(name)
    old = final.with_name(f".old-{final.name}-{os.getpid()}")
    if final.exists():
        final.rename(old)
    build.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    image = find(name)
    assert image is not None
    return image


def _scratch(name: str) -> pathlib.Path:
    store().mkdir(parents=True, exist_ok=True)
    return pathlib.Path(tempfile.mkdtemp(prefix=f".build-{image_dir(name).name}-", dir=store()))


def build_base(
    name: str = BASE_IMAGE, *, rebuild: bool = False, mirror: str | None = None
) -> LocalImage:
    """Debootstrap the base root filesystem (1-3 min), or reuse the stored one."""
    if not rebuild and (image := find(name)) is not None:
        return image
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed (apt-get install -y debootstrap)")
    build = _scratch(name)
    try:
        root = build / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}"]
        _run([*cmd, "bookworm", str(root), mirror or apt_mirror()], "debootstrap")
        for sub in _LEAN:
            shutil.rmtree(root / sub, ignore_errors=True)
        # A fresh id per build: images built from an older base are rebuilt.
        return _publish(name, build, {"hash": f"debootstrap-{uuid.uuid4().hex[:16]}", "env": {}})
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise


def dockerfile_steps(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: comments dropped, continuation lines joined."""
    steps: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.strip():
            op, _, rest = line.strip().partition(" ")
            steps.append((op.upper(), rest.strip()))
    if pending.strip():
        raise ImageBuildError("Dockerfile ends with a line continuation")
    return steps


def _words(args: str) -> list[str]:
    """JSON (exec) form or whitespace-separated words."""
    if args.startswith("["):
        try:
            value = json.loads(args)
        except ValueError as e:
            raise ImageBuildError(f"bad JSON form {args!r}: {e}") from None
        return [str(v) for v in value]
    return args.split()


def _keyvals(args: str) -> dict[str, str]:
    """``ENV K=V K2="V 2"`` or the legacy ``ENV K V``."""
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return {words[0]: args.split(None, 1)[1] if len(words) > 1 else ""}
    return {k: v for k, _, v in (w.partition("=") for w in words)}


def _copy_args(
    words: list[str], op: str, context: pathlib.Path
) -> tuple[list[str], list[pathlib.Path], str]:
    """(--chown flags, source paths on the host, destination) of a COPY/ADD."""
    flags = [w for w in words if w.startswith("--")]
    if any(not f.startswith("--chown=") for f in flags) or len(words) - len(flags) < 2:
        raise ImageBuildError(f"{op} {' '.join(words)}: unsupported by the local builder")
    *sources, dest = [w for w in words if not w.startswith("--")]
    ctx = context.resolve()
    paths = [pathlib.Path(p).resolve() for s in sources for p in sorted(glob.glob(str(ctx / s)))]
    if not paths or any(not p.is_relative_to(ctx) for p in paths):
        raise ImageBuildError(f"{op} {' '.join(sources)}: not found in {context}")
    if op == "ADD" and any(re.search(r"\.(tar|tgz|tar\.\w+)$", p.name) for p in paths):
        raise ImageBuildError(
            f"ADD {' '.join(sources)}: the local builder does not unpack archives"
        )
    return flags, paths, dest


def check_steps(steps: list[tuple[str, str]], context: pathlib.Path) -> None:
    """Raise for what the local builder cannot do, before anything is copied."""
    for op, args in steps:
        if op in _IGNORED:
            continue
        if op not in ("WORKDIR", "ENV", "ARG", "COPY", "ADD", "RUN"):
            raise ImageBuildError(
                f"Dockerfile instruction {op} is not supported by the local builder"
            )
        if op != "RUN" and "$" in args:
            raise ImageBuildError(f"{op} {args}: variables are not supported by the local builder")
        if op in ("COPY", "ADD"):
            _copy_args(_words(args), op, context)


class _Build:
    """One Dockerfile applied to a copy of its parent image."""

    def __init__(self, root: pathlib.Path, context: pathlib.Path, parent: LocalImage):
        self.root, self.context = root, context
        self.env = dict(parent.env)
        self.args: dict[str, str] = {}
        self.workdir = parent.workdir or "/"

    def apply(self, op: str, args: str) -> None:
        """One instruction (checked by :func:`check_steps`)."""
        if op == "WORKDIR":
            self.workdir = posixpath.normpath(posixpath.join(self.workdir, args))
            self.run(["mkdir", "-p", self.workdir], chdir="/")
        elif op == "ENV":
            self.env.update(_keyvals(args))
        elif op == "ARG":
            self.args.update({k: v for k, v in _keyvals(args).items() if v})
        elif op in ("COPY", "ADD"):
            self.copy(_words(args), op)
        elif op == "RUN":
            self.run(_words(args) if args.startswith("[") else ["/bin/sh", "-c", args])

    def copy(self, words: list[str], op: str) -> None:
        """Inside bwrap, so the destination path means what it means in the image (its
        symlinks are never followed on the host)."""
        flags, paths, dest = _copy_args(words, op, self.context)
        ctx = self.context.resolve()
        q = shlex.quote
        d = q(posixpath.join(self.workdir, dest))
        into = dest.endswith("/") or len(words) - len(flags) > 2
        # Like Docker: a folder's contents are copied, everything ends up owned by root.
        cp = "cp -a --no-preserve=ownership"
        script = f"into={int(into)}; [ -d {d} ] && into=1\n"
        for src in paths:
            inside = q(f"{_CONTEXT}/{src.relative_to(ctx).as_posix()}")
            if src.is_dir():
                script += f"mkdir -p {d} && {cp} {inside}/. {d}\n"
            else:
                script += f"if [ $into = 1 ]; then mkdir -p {d} && {cp} {inside} {d}/; "
                script += f'else mkdir -p "$(dirname {d})" && {cp} {inside} {d}; fi\n'
        if flags:
            script += f"chown -R {q(flags[0].split('=', 1)[1])} {d}\n"
        self.run(["/bin/sh", "-ec", script], context=ctx)

    def run(
        self, argv: list[str], *, context: pathlib.Path | None = None, chdir: str | None = None
    ) -> None:
        env = {"PATH": _PATH, "HOME": "/root", **self.args, **self.env}
        cmd = ["bwrap", "--bind", str(self.root), "/", "--dev", "/dev", "--proc", "/proc"]
        if context is not None:  # on a tmpfs over /run: no mount point is left in the image
            cmd += ["--tmpfs", "/run", "--ro-bind", str(context), _CONTEXT]
        cmd += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf", "--unshare-pid"]
        cmd += ["--die-with-parent", "--clearenv", "--chdir", chdir or self.workdir]
        for k, v in env.items():
            cmd += ["--setenv", k, v]
        _run([*cmd, "--", *argv], f"RUN {shlex.join(argv)[:200]}")


def build(name: str, dockerfile: pathlib.Path, context: pathlib.Path, digest: str) -> LocalImage:
    """Build ``name`` from ``dockerfile`` and ``context`` (bubblewrap, root); ``digest`` is
    stored as its hash. Its ``FROM`` image must be in the store (the base is built on demand)."""
    steps = dockerfile_steps(dockerfile.read_text())
    if not steps or steps[0][0] != "FROM" or any(op == "FROM" for op, _ in steps[1:]):
        raise ImageBuildError(f"{dockerfile}: the local builder wants exactly one FROM, first")
    check_steps(steps[1:], context)
    base_name = steps[0][1].split()[0]
    parent = find(base_name)
    if parent is None and base_name == BASE_IMAGE:
        parent = build_base(base_name)
    if parent is None:
        raise ImageBuildError(f"{base_name} is not in the local image store ({store()})")
    scratch = _scratch(name)
    try:
        root = scratch / "rootfs"
        _run(["cp", "-a", "--reflink=auto", str(parent.root), str(root)], f"copying {base_name}")
        b = _Build(root, context, parent)
        for op, args in steps[1:]:
            if op not in _IGNORED:
                b.apply(op, args)
        meta: dict[str, object] = {
            "hash": digest,
            "env": b.env,
            "workdir": b.workdir,
            "from": base_name,
        }
        return _publish(name, scratch, meta)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
