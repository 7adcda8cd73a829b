"""Build a converted row's container image from its repository's git source (``images build
--repo-source TEMPLATE``).

``FROM`` the base image: the repository at ``base_commit`` set up as SWE-bench does, and a venv
with pytest and the repository (recipes.py); offline, logged beside the dataset, idempotent by a
content-hash label. Details: docs/modules/images.md.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import time
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.datasets.buildspec import BuildSpec
from coding_agent_rl.datasets.recipes import (
    VENV,
    Recipe,
    declared_spec,
    install_script,
    pretend_version,
    recipe_for,
)
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.images.common import ImageBuildError
from coding_agent_rl.images.dataset import _image_id, _label, build_image
from coding_agent_rl.images.docker_build import BuildCancelled, raise_if_cancelled
from coding_agent_rl.images.repo_source import checkout_at, mirror, source_url
from coding_agent_rl.images.wheelset import WheelSet, download

BUILDER_VERSION = "4"  # 4: the environment resolver (datasets/environment/)
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
    record_path = folder / f"{slug(image)}.environment.json"
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir()
    log_path.write_text(f"# {image}: {url} at {row.base_commit} ({time.strftime('%H:%M:%S')})\n")
    keep = False
    try:
        raise_if_cancelled(f"build of {image}")
        base = checkout_at(mirror(url), row.base_commit, ctx / "repo", single_branch=single_branch)
        python = target_python(base_image)[0]
        try:
            recipe = recipe_for(row.metadata, ctx / "repo", python)
        except ValueError as e:
            raise ImageBuildError(f"{row.repo}@{base[:12]}: {e}") from None
        wheels = ctx / "wheels"
        wheels.mkdir()
        keep = True
        record_path.unlink(missing_ok=True)
        fetched = download(
            recipe, ctx / "repo", wheels, pip_platform_args(base_image), python, log_path
        )
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
        write_record(record_path, image, recipe, fetched, installed(image))
        keep = False
    except BaseException as e:  # a failed step's context is kept to reproduce it
        keep = keep and isinstance(e, ImageBuildError) and not isinstance(e, BuildCancelled)
        raise
    finally:
        if not keep:
            shutil.rmtree(ctx, ignore_errors=True)
    notes = "; ".join(
        [
            *recipe.notes,
            *(f"dropped {d['name']} ({d['source']}): {d['why']}" for d in fetched.dropped),
        ]
    )
    sources = f" from {', '.join(recipe.sources)}" if recipe.sources else ""
    detail = f"{row.repo}@{base[:12]}, {recipe.source} recipe{sources}"
    return True, detail + (f" ({notes})" if notes else "")


def installed(image: str) -> list[dict[str, str]]:
    """``pip list`` of the image's venv (name, version)."""
    r = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            image,
            "python",
            "-m",
            "pip",
            "list",
            "--format",
            "json",
            "--disable-pip-version-check",
        ],
        capture_output=True,
        text=True,
    )
    try:
        return list(json.loads(r.stdout)) if r.returncode == 0 else []
    except json.JSONDecodeError:
        return []


def record(recipe: Recipe, fetched: WheelSet, packages: list[dict[str, str]]) -> dict[str, Any]:
    """What the image's environment is and where each part came from."""
    from coding_agent_rl.datasets.environment import canonical

    declared: dict[str, list[str]] = {}
    for r in recipe.all_requirements():
        declared.setdefault(r.name, []).append(f"{r.spec} ({r.source})")
    pins = {n: f"{n}=={v} ({src})" for n, v, src in recipe.pins}
    rows = []
    for p in packages:
        name = canonical(str(p.get("name", "")))
        came = declared.get(name) or ([pins[name]] if name in pins else [])
        if not came and p.get("editable_project_location"):
            came = [f"the repository{'[' + ','.join(recipe.extras) + ']' if recipe.extras else ''}"]
        rows.append(
            {
                "name": p.get("name"),
                "version": p.get("version"),
                "from": came or ["a dependency"],
                "pinned_by_lock": name in pins,
            }
        )
    return {
        "recipe": recipe.source,
        "sources": list(recipe.sources),
        "extras": list(recipe.extras),
        "requirements": [dataclasses.asdict(r) for r in recipe.all_requirements()],
        "lock_pins": len(recipe.pins),
        "built_from_sdist": fetched.built_from_sdist,
        "dropped": fetched.dropped,
        "notes": list(recipe.notes),
        "installed": rows,
    }


def write_record(
    path: pathlib.Path,
    image: str,
    recipe: Recipe,
    fetched: WheelSet,
    packages: list[dict[str, str]],
) -> None:
    path.write_text(json.dumps({"image": image, **record(recipe, fetched, packages)}, indent=1))


def record_path_for(image: str, log_dir: pathlib.Path) -> pathlib.Path:
    return log_dir / f"{slug(image)}.environment.json"
