"""Build a converted row's container image from its repository's git source (``images build
--repo-source TEMPLATE``).

``FROM`` the base image: the repository at ``base_commit`` set up as SWE-bench does, and a venv
with pytest and the repository (recipes.py); offline, logged beside the dataset, idempotent by a
content-hash label. Details: docs/modules/images.md.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.datasets.buildspec import BuildSpec
from coding_agent_rl.datasets.recipes import (
    ALWAYS,
    VENV,
    declared_spec,
    install_script,
    pretend_version,
    recipe_for,
)
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.images.common import ImageBuildError
from coding_agent_rl.images.dataset import _image_id, _label, build_image
from coding_agent_rl.images.docker_build import BuildCancelled, raise_if_cancelled
from coding_agent_rl.images.failure import root_cause
from coding_agent_rl.images.repo_source import checkout_at, mirror, source_url

BUILDER_VERSION = "3"
WHEELS = "/tmp/car-wheels"
_PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def buildable(row: TaskRow) -> str | None:
    """Why ``row`` cannot be built from its repository, or None when it can."""
    if row.build is not None:
        return "it has a build context (built from its Dockerfile)"
    if not row.repo:
        return "no metadata.repo ('owner/name') to clone"
    if not row.base_commit:
        return "no metadata.base_commit to check out"
    return None


def image_key(row: TaskRow) -> dict[str, Any]:
    """What makes two rows' images identical (rows sharing an image must agree on it)."""
    spec = declared_spec(row.metadata)
    return {
        "repo": row.repo,
        "base_commit": row.base_commit,
        "workdir": row.workdir,
        "recipe": spec,
        "version": pretend_version(row.metadata.get("version")),
    }


def content_hash(row: TaskRow, base_image: str, single_branch: bool) -> str:
    base_id = _image_id(base_image)
    if not base_id:
        raise ImageBuildError(f"base image {base_image} not found (coding-agent-rl images base)")
    data = {
        **image_key(row),
        "base": base_id,
        "single_branch": single_branch,
        "builder": BUILDER_VERSION,
    }
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def up_to_date(image: str, digest: str) -> bool:
    return _label(image) == digest


@functools.lru_cache(maxsize=8)
def target_python(base_image: str) -> tuple[str, str, str]:
    """(``X.Y``, glibc ``A.B``, machine) of the base image's ``python3``."""
    probe = (
        "import os, platform, sys; print('%d.%d' % sys.version_info[:2]); "
        "print((os.confstr('CS_GNU_LIBC_VERSION') or 'glibc 2.17').split()[-1]); "
        "print(platform.machine())"
    )
    r = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", base_image, "python3", "-c", probe],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise ImageBuildError(f"cannot run python3 in {base_image}: {r.stderr.strip()[-300:]}")
    version, glibc, machine = r.stdout.split()
    return version, glibc, machine


def pip_platform_args(base_image: str) -> list[str]:
    """``pip download`` options selecting wheels the base image's Python can install."""
    version, glibc, machine = target_python(base_image)
    major, minor = (int(x) for x in glibc.split(".")[:2])
    tag = "cp" + version.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", version, "--implementation", "cp"]
    args += ["--abi", tag, "--abi", "abi3", "--abi", "none"]
    platforms = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 4, -1)]
    platforms += [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"linux_{machine}"]
    for p in platforms:
        args += ["--platform", p]
    return args


def _pip_download(
    reqs: list[str],
    dest: pathlib.Path,
    base_image: str,
    env: dict[str, str],
    log_path: pathlib.Path,
) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "-d", str(dest)]
    cmd += pip_platform_args(base_image) + reqs
    t0 = time.monotonic()
    overlay = ["env", *(f"{k}={v}" for k, v in env.items())]  # on top of this process's env
    r = subprocess.run(overlay + cmd, capture_output=True, text=True)
    with log_path.open("a") as log:
        log.write(f"$ {shlex.join(cmd)}\n{r.stdout}{r.stderr}")
        log.write(f"(exit {r.returncode}, {time.monotonic() - t0:.1f}s)\n")
    if r.returncode != 0:
        raise_if_cancelled("pip download")  # Ctrl-C reached pip too
        lines = r.stderr.splitlines()
        cause = root_cause(lines) or f"exit {r.returncode}"
        raise ImageBuildError(
            f"pip download on the host failed: {cause}; log: {log_path}; "
            f"reproduce: {shlex.join(['env', *(f'{k}={v}' for k, v in env.items()), *cmd])}"
        )


def download_wheels(
    recipe: Any, repo_dir: pathlib.Path, dest: pathlib.Path, base_image: str, log_path: pathlib.Path
) -> None:
    """Every wheel the recipe installs, for the base image's Python, into ``dest``: the
    runtime requirements, then (resolved apart: they go into pip's isolated build environment)
    the build backend's."""
    reqs = [*ALWAYS, *recipe.packages]
    for f in recipe.requirement_files:
        reqs += ["-r", str(repo_dir / f)]
    if recipe.install:
        extras = f"[{','.join(recipe.extras)}]" if recipe.extras else ""
        reqs.append(f"{repo_dir}{extras}")
    env = recipe.environment()
    _pip_download(reqs, dest, base_image, env, log_path)
    if recipe.build_requires:
        _pip_download(list(recipe.build_requires), dest, base_image, env, log_path)


def dockerfile(base_image: str, workdir: str, row: TaskRow, digest: str) -> str:
    q = shlex.quote
    return (
        f"FROM {base_image}\n"
        f"COPY wheels/ {WHEELS}/\n"
        f"COPY repo/ {workdir}/\n"
        f"WORKDIR {workdir}\n"
        f"RUN PIP_NO_INDEX=1 PIP_FIND_LINKS={WHEELS} PIP_DISABLE_PIP_VERSION_CHECK=1 "
        f"bash {WHEELS}/car-install.sh && rm -rf {WHEELS}\n"
        f"ENV VIRTUAL_ENV={VENV} PATH={_PATH}\n"
        f"LABEL coding-agent-rl.repo={q(row.repo or '')} "
        f"coding-agent-rl.base-commit={q(row.base_commit or '')}\n"
    )


def log_dir_for(dataset: str | pathlib.Path | None) -> pathlib.Path:
    """Where build logs go: ``<dataset stem>.build-logs/`` beside the dataset when that folder
    is writable, else the cache's ``build-logs/``."""
    if dataset is not None:
        path = pathlib.Path(dataset)
        folder = path.with_name(f"{path.stem}.build-logs")
        if os.access(path.parent, os.W_OK):
            return folder
    return pathlib.Path(settings.current().cache_root) / "build-logs"


def slug(image: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", image)


def build_repo_image(
    image: str,
    row: TaskRow,
    template: str,
    *,
    base_image: str,
    rebuild: bool = False,
    single_branch: bool = True,
    log_dir: pathlib.Path | None = None,
) -> tuple[bool, str]:
    """Build ``image`` for ``row`` from ``template``'s repository unless it is up to date;
    returns (built, detail). Raises ImageBuildError / RepoSourceError naming the problem.

    The build's output goes to ``<log_dir>/<image>.log``; its context is built in
    ``<log_dir>/<image>.context`` and kept when a step fails (the message says how to
    reproduce it there), removed otherwise."""
    digest = content_hash(row, base_image, single_branch)
    if not rebuild and up_to_date(image, digest):
        return False, "up to date"
    assert row.repo and row.base_commit
    url = source_url(template, row.repo)
    folder = log_dir or log_dir_for(None)
    folder.mkdir(parents=True, exist_ok=True)
    log_path, ctx = folder / f"{slug(image)}.log", folder / f"{slug(image)}.context"
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir()
    log_path.write_text(f"# {image}: {url} at {row.base_commit} ({time.strftime('%H:%M:%S')})\n")
    keep = False
    try:
        raise_if_cancelled(f"build of {image}")
        base = checkout_at(mirror(url), row.base_commit, ctx / "repo", single_branch=single_branch)
        try:
            recipe = recipe_for(row.metadata, ctx / "repo")
        except ValueError as e:
            raise ImageBuildError(f"{row.repo}@{base[:12]}: {e}") from None
        wheels = ctx / "wheels"
        wheels.mkdir()
        keep = True
        download_wheels(recipe, ctx / "repo", wheels, base_image, log_path)
        raise_if_cancelled(f"build of {image}")
        script = install_script(recipe, row.workdir, WHEELS)
        (wheels / "car-install.sh").write_text(script)
        (ctx / "Dockerfile").write_text(dockerfile(base_image, row.workdir, row, digest))
        with log_path.open("a") as log:
            log.write(f"# Dockerfile\n{(ctx / 'Dockerfile').read_text()}# car-install.sh\n{script}")
            log.write(f"# docker build at {time.strftime('%H:%M:%S')}\n")
        build_image(
            image,
            BuildSpec(context=ctx, dockerfile=ctx / "Dockerfile"),
            rebuild=True,
            digest=digest,
            source="repo",
            log_path=log_path,
            nocache=rebuild,
            append=True,
        )
        keep = False
    except BaseException as e:  # a failed step's context is kept to reproduce it
        keep = keep and isinstance(e, ImageBuildError) and not isinstance(e, BuildCancelled)
        raise
    finally:
        if not keep:
            shutil.rmtree(ctx, ignore_errors=True)
    notes = "; ".join(recipe.notes)
    detail = f"{row.repo}@{base[:12]}, {recipe.source} recipe" + (f" ({notes})" if notes else "")
    return True, detail
