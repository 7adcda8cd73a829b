"""Build a converted row's image from its repository's git source (``images build
--repo-source TEMPLATE``).

The image is ``FROM`` the base image (``coding-agent-rl/base`` unless told otherwise): the
repository at ``base_commit`` in the row's workdir, set up as SWE-bench sets up its
repositories (repo_source.py), and an isolated venv with pytest and the repository in
development mode (recipes.py), first on ``PATH``. Wheels are downloaded on the host for the base
image's Python and platform; nothing inside the build needs the network.

Idempotent by content hash: the label :data:`~coding_agent_rl.images.dataset.HASH_LABEL`
covers the base image's id, the repository, ``base_commit``, the workdir, the declared recipe
and this builder's version, so an up-to-date image costs one ``docker image inspect`` (no clone,
no download).
"""

from __future__ import annotations

import functools
import hashlib
import json
import pathlib
import shlex
import subprocess
import sys
import tempfile
from typing import Any

from coding_agent_rl.datasets.buildspec import BuildSpec
from coding_agent_rl.datasets.recipes import ALWAYS, VENV, declared_spec, install_script, recipe_for
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.images.common import ImageBuildError
from coding_agent_rl.images.dataset import _image_id, _label, build_image
from coding_agent_rl.images.repo_source import checkout_at, mirror, source_url

BUILDER_VERSION = "2"
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


def download_wheels(
    recipe: Any, repo_dir: pathlib.Path, dest: pathlib.Path, base_image: str
) -> None:
    """Every wheel the recipe installs, for the base image's Python, into ``dest``."""
    reqs = [*ALWAYS, *recipe.packages]
    for f in recipe.requirement_files:
        reqs += ["-r", str(repo_dir / f)]
    if recipe.install:
        extras = f"[{','.join(recipe.extras)}]" if recipe.extras else ""
        reqs.append(f"{repo_dir}{extras}")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "-d", str(dest)]
    cmd += pip_platform_args(base_image) + reqs
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("ERROR")] or [
            r.stderr.strip()[-400:]
        ]
        raise ImageBuildError(f"pip download failed: {errors[0][:400]}")


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


def build_repo_image(
    image: str,
    row: TaskRow,
    template: str,
    *,
    base_image: str,
    rebuild: bool = False,
    single_branch: bool = True,
) -> tuple[bool, str]:
    """Build ``image`` for ``row`` from ``template``'s repository unless it is up to date;
    returns (built, detail). Raises ImageBuildError / RepoSourceError naming the problem."""
    digest = content_hash(row, base_image, single_branch)
    if not rebuild and up_to_date(image, digest):
        return False, "up to date"
    assert row.repo and row.base_commit
    url = source_url(template, row.repo)
    with tempfile.TemporaryDirectory(prefix="car-build-") as tmp:
        ctx = pathlib.Path(tmp)
        base = checkout_at(mirror(url), row.base_commit, ctx / "repo", single_branch=single_branch)
        recipe = recipe_for(row.metadata, ctx / "repo")
        wheels = ctx / "wheels"
        wheels.mkdir()
        download_wheels(recipe, ctx / "repo", wheels, base_image)
        (wheels / "car-install.sh").write_text(install_script(recipe, row.workdir, WHEELS))
        (ctx / "Dockerfile").write_text(dockerfile(base_image, row.workdir, row, digest))
        build_image(
            image,
            BuildSpec(context=ctx, dockerfile=ctx / "Dockerfile"),
            rebuild=True,
            digest=digest,
            source="repo",
        )
    notes = "; ".join(recipe.notes)
    detail = f"{row.repo}@{base[:12]}, {recipe.source} recipe" + (f" ({notes})" if notes else "")
    return True, detail
