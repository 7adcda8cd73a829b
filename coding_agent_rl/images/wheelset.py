"""The offline wheel set of a repository image, made on the host: ``pip download`` for the base
image's Python of the recipe's requirements, the lock's pins and the repository (run in the
repository, so ``-e .[extra]`` and ``-r`` are its own), then the build backend's requirements.

A package with no wheel is built from its sdist on the host (``pip wheel --no-deps``, isolated)
when the result is pure Python; an unobtainable optional (docs/lint) requirement or lock pin is
dropped and recorded; an unobtainable required one fails in one line naming its file.
Details: docs/modules/images.md."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex
import subprocess
import sys
import time
from typing import Any

from coding_agent_rl.datasets.environment import Requirement, name_of
from coding_agent_rl.datasets.recipes import CONSTRAINTS, REQUIREMENTS, Recipe
from coding_agent_rl.images.common import ImageBuildError
from coding_agent_rl.images.docker_build import raise_if_cancelled
from coding_agent_rl.images.failure import root_cause

_MISSING = re.compile(
    r"No matching distribution found for (\S+)"
    r"|Cannot install (\S+) because these package versions have conflicting dependencies"
)
MAX_FIXES = 12  # sdist builds or drops before giving up


@dataclasses.dataclass
class WheelSet:
    """What the wheel set holds beyond plain wheels: sdist builds and what was dropped."""

    built_from_sdist: list[str] = dataclasses.field(default_factory=list)
    dropped: list[dict[str, str]] = dataclasses.field(default_factory=list)  # name, source, why

    def dropped_names(self) -> set[str]:
        return {d["name"] for d in self.dropped}


def _run(cmd: list[str], env: dict[str, str], cwd: pathlib.Path, log_path: pathlib.Path) -> Any:
    t0 = time.monotonic()
    overlay = ["env", *(f"{k}={v}" for k, v in env.items())]  # on top of this process's env
    r = subprocess.run(overlay + cmd, capture_output=True, text=True, cwd=cwd)
    with log_path.open("a") as log:
        log.write(f"$ (cd {shlex.quote(str(cwd))} && {shlex.join(cmd)})\n{r.stdout}{r.stderr}")
        log.write(f"(exit {r.returncode}, {time.monotonic() - t0:.1f}s)\n")
    return r


def _fail(
    r: Any,
    what: str,
    cmd: list[str],
    env: dict[str, str],
    cwd: pathlib.Path,
    log_path: pathlib.Path,
) -> None:
    raise_if_cancelled(what)  # Ctrl-C reached pip too
    cause = root_cause(r.stderr.splitlines()) or f"exit {r.returncode}"
    command = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *cmd])
    raise ImageBuildError(
        f"{what} on the host failed: {cause}; log: {log_path}; "
        f"reproduce: cd {shlex.quote(str(cwd))} && {command}"
    )


def build_sdist(
    spec: str,
    dest: pathlib.Path,
    constraints: pathlib.Path,
    env: dict[str, str],
    cwd: pathlib.Path,
    log_path: pathlib.Path,
) -> bool:
    """Build ``spec`` from its sdist into ``dest``; True when the wheel is pure Python."""
    out = dest.parent / "sdist-build"
    out.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-binary", ":all:"]
    cmd += ["-c", str(constraints), "-w", str(out), spec]
    if _run(cmd, env, cwd, log_path).returncode != 0:
        return False
    wheels = sorted(out.glob("*.whl"))
    pure = [w for w in wheels if w.name.endswith("-none-any.whl")]
    for w in pure:
        w.rename(dest / w.name)
    for w in out.glob("*"):
        w.unlink()
    return bool(pure) and len(pure) == len(wheels)


def download(
    recipe: Recipe,
    repo_dir: pathlib.Path,
    dest: pathlib.Path,
    platform_args: list[str],
    python: str,
    log_path: pathlib.Path,
) -> WheelSet:
    """Fill ``dest`` with every wheel ``recipe`` installs (and write its ``-r`` / ``-c`` files
    there). Raises ImageBuildError naming what cannot be obtained and the file declaring it."""
    env = recipe.environment()
    repo_dir, dest = repo_dir.resolve(), dest.resolve()
    result = WheelSet()
    reqs, cons = dest / REQUIREMENTS, dest / CONSTRAINTS
    by_name: dict[str, Requirement] = {}
    for r in recipe.all_requirements():  # optional only where every declaration of it is
        if r.name not in by_name or by_name[r.name].optional:
            by_name[r.name] = r
    pins = {n: src for n, _, src in recipe.pins}
    tried: set[str] = set()
    while True:
        reqs.write_text(recipe.requirements_text(result.dropped_names()))
        cons.write_text(recipe.constraints_text(result.dropped_names()))
        cmd = [sys.executable, "-m", "pip", "download", "-q", "-d", str(dest)]
        cmd += ["--find-links", str(dest), *platform_args, "-c", str(cons), "-r", str(reqs)]
        if recipe.install:
            extras = f"[{','.join(recipe.extras)}]" if recipe.extras else ""
            cmd.append(f".{extras}")
        r = _run(cmd, env, repo_dir, log_path)
        if r.returncode == 0:
            break
        found = _MISSING.search(r.stderr)
        spec = (found.group(1) or found.group(2)) if found else ""
        name = name_of(spec)
        if not found or name in tried or len(tried) >= MAX_FIXES:
            _fail(r, "pip download", cmd, env, repo_dir, log_path)
        tried.add(name)
        if build_sdist(spec, dest, cons, env, repo_dir, log_path):
            result.built_from_sdist.append(spec)
            continue
        declared = by_name.get(name)
        why = f"no wheel for Python {python}, and its sdist does not build as pure Python"
        if declared and declared.optional:
            result.dropped.append({"name": name, "source": declared.source, "why": why})
        elif name in pins and not declared:
            result.dropped.append({"name": name, "source": pins[name], "why": f"pin: {why}"})
        else:
            src = f" (declared in {declared.source})" if declared else " (a dependency)"
            raise ImageBuildError(f"{spec}{src} cannot be obtained: {why}; log: {log_path}")
    if recipe.build_requires:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), *platform_args]
        cmd += list(recipe.build_requires)
        r = _run(cmd, env, repo_dir, log_path)
        if r.returncode != 0:
            _fail(r, "pip download", cmd, env, repo_dir, log_path)
    return result
