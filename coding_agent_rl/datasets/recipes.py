"""How a repository's Python environment is installed in its container image: a venv at
``/opt/venv`` with pytest and the repository in development mode.

The recipe comes from the row's ``install_config``, else the ``swebench`` specs, else what the
repository declares (environment/); builds are offline (wheels downloaded on the host).
Details: docs/modules/datasets.md.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex
from typing import Any

from coding_agent_rl.datasets.build_requires import build_requirements
from coding_agent_rl.datasets.environment import (
    DeclarationError,
    Environment,
    Requirement,
    mismatch,
    resolve,
)
from coding_agent_rl.datasets.environment import requirements_files as req_files
from coding_agent_rl.datasets.environment.model import Declared

VENV = "/opt/venv"
ALWAYS = ("pip", "setuptools", "wheel", "pytest")
REQUIREMENT_FILES = req_files.TOP
REQUIREMENTS = "car-requirements.txt"  # what the image installs, beside the wheels
CONSTRAINTS = "car-constraints.txt"  # the lock's pins
_PEP440 = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
# Read by setuptools-scm (hence hatch-vcs), pdm-backend, poetry-dynamic-versioning.
_VERSION_VARS = (
    "SETUPTOOLS_SCM_PRETEND_VERSION",
    "PDM_BUILD_SCM_VERSION",
    "POETRY_DYNAMIC_VERSIONING_BYPASS",
)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What to download on the host and run in the image (in the workdir, venv first on PATH)."""

    source: str  # "install_config" | "swebench" | "generic"
    packages: tuple[str, ...] = ()  # pip requirement strings, besides ALWAYS
    requirement_files: tuple[str, ...] = ()  # repository-relative (read into ``requirements``)
    requirements: tuple[Requirement, ...] = ()  # every declared one, with its file
    pins: tuple[tuple[str, str, str], ...] = ()  # (name, version, lock file)
    sources: tuple[str, ...] = ()  # the declarations read, in precedence order
    install: str = ""  # shell command; empty: the repository is not installed
    extras: tuple[str, ...] = ()  # of the repository itself, for the wheel download
    notes: tuple[str, ...] = ()
    build_requires: tuple[str, ...] = ()  # the build backend's, downloaded apart
    version: str = "0.0.0"  # given to backends that read it from git

    def environment(self) -> dict[str, str]:
        """Environment of the host's download and the image's install."""
        return {k: self.version for k in _VERSION_VARS}

    def key(self) -> dict[str, Any]:
        """What the image's content hash covers."""
        return dataclasses.asdict(self)

    def all_requirements(self) -> list[Requirement]:
        """ALWAYS, the spec's packages, then the declared requirements."""
        given = [Requirement(p, "coding-agent-rl") for p in ALWAYS]
        given += [Requirement(p, self.source) for p in self.packages]
        return given + list(self.requirements)

    def requirements_text(self, dropped: set[str] = frozenset()) -> str:  # type: ignore[assignment]
        """The ``-r`` file the host downloads for and the image installs (``dropped``: names)."""
        lines = [
            f"{r.spec}  # {r.source}" for r in self.all_requirements() if r.name not in dropped
        ]
        return "\n".join(lines) + "\n"

    def constraints_text(self, dropped: set[str] = frozenset()) -> str:  # type: ignore[assignment]
        lines = [f"{n}=={v}  # {src}" for n, v, src in self.pins if n not in dropped]
        return "\n".join(lines) + "\n"


def swebench_spec(repo: str | None, version: Any) -> dict[str, Any] | None:
    """The swebench package's spec for ``repo`` at ``version``, when the package has one."""
    if not repo or version is None:
        return None
    try:
        from swebench.harness.constants import (
            MAP_REPO_VERSION_TO_SPECS,
        )
    except ImportError:
        return None
    spec = MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(str(version))
    return dict(spec) if isinstance(spec, dict) else None


def declared_spec(metadata: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(source, spec) the row itself or the swebench package provides, else None."""
    config = metadata.get("install_config")
    if isinstance(config, dict) and config:
        return "install_config", config
    spec = swebench_spec(metadata.get("repo"), metadata.get("version"))
    return ("swebench", spec) if spec else None


def _as_list(value: Any) -> list[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _extras_of(install: str) -> tuple[str, ...]:
    for word in shlex.split(install):
        if word.startswith(".[") and word.endswith("]"):
            return tuple(e.strip() for e in word[2:-1].split(",") if e.strip())
    return ()


def from_spec(source: str, spec: dict[str, Any], repo_dir: pathlib.Path) -> Recipe:
    """A recipe from a SWE-bench-style spec (``install``, ``pip_packages``, ``packages``,
    ``reqs_path``, ``pre_install``, ``python``)."""
    notes = []
    packages = _as_list(spec.get("pip_packages"))
    files = [f for f in _as_list(spec.get("reqs_path")) if (repo_dir / f).is_file()]
    listed = spec.get("packages")
    if listed == "requirements.txt":
        files = files or [f for f in REQUIREMENT_FILES[:1] if (repo_dir / f).is_file()]
    elif listed == "environment.yml":
        notes.append("conda environment.yml not supported: used pip requirements only")
    elif isinstance(listed, str) and listed.strip():
        packages += listed.split()
    for step in _as_list(spec.get("pre_install")):
        notes.append(f"pre_install not run (no network in builds): {step}")
    if spec.get("python"):
        notes.append(f"spec asks for Python {spec['python']}; the image's Python is used")
    install = str(spec.get("install") or "")
    declared = Declared()
    seen: set[tuple[pathlib.Path, bool]] = set()
    for f in files:
        req_files.read_file(repo_dir / f, repo_dir, declared, seen, pins=False)
    extras = tuple(dict.fromkeys((*_extras_of(install), *declared.extras)))
    return Recipe(
        source=source,
        packages=tuple(packages),
        requirement_files=tuple(files),
        requirements=tuple(declared.requirements),
        pins=tuple((n, v, src) for n, (v, src) in declared.pins.items()),
        sources=tuple(declared.sources),
        install=install,
        extras=extras,
        notes=tuple(notes + declared.notes),
    )


def generic(repo_dir: pathlib.Path, python: str = "3.11") -> Recipe:
    """What the repository declares (environment/), then the repository itself in development
    mode with the extras its declarations name."""
    env: Environment = resolve(repo_dir, python)
    installable = any((repo_dir / f).is_file() for f in ("pyproject.toml", "setup.py", "setup.cfg"))
    base = dict(
        requirements=tuple(env.requirements),
        pins=tuple((n, v, src) for n, (v, src) in env.pins.items()),
        sources=tuple(env.sources),
        requirement_files=tuple(s for s in env.sources if s.endswith(".txt")),
    )
    if not installable:
        notes = (*env.notes, "no setup file: not installed")
        return Recipe("generic", notes=notes, **base)  # type: ignore[arg-type]
    extras = tuple(env.extras)
    target = f".[{','.join(extras)}]" if extras else "."
    return Recipe(
        "generic",
        install=f"python -m pip install -e {shlex.quote(target)}",
        extras=extras,
        notes=tuple(env.notes),
        **base,  # type: ignore[arg-type]
    )


def pretend_version(version: Any) -> str:
    """The row's ``version`` when it is a PEP 440 version, else ``0.0.0``."""
    text = str(version or "").strip().lstrip("v")
    return text if _PEP440.match(text) else "0.0.0"


def recipe_for(metadata: dict[str, Any], repo_dir: pathlib.Path, python: str = "3.11") -> Recipe:
    """The recipe for a row (its metadata) whose repository is checked out at ``repo_dir``, for
    the image's Python ``python`` (X.Y). Raises ValueError (one line naming the file) for a
    declaration that cannot be read, or a ``requires-python`` the image's Python does not meet."""
    declared = declared_spec(metadata)
    try:
        recipe = from_spec(*declared, repo_dir) if declared else generic(repo_dir, python)
    except DeclarationError as e:
        raise ValueError(str(e)) from None
    if not declared:
        problem = mismatch(resolve_python(repo_dir, python), python)
        if problem:
            raise ValueError(problem)
    needs = build_requirements(repo_dir).requires if recipe.install else ()
    return dataclasses.replace(
        recipe, build_requires=needs, version=pretend_version(metadata.get("version"))
    )


def resolve_python(repo_dir: pathlib.Path, python: str) -> list[tuple[str, str]]:
    """Every ``requires-python`` the repository and its lock declare, with the file."""
    return resolve(repo_dir, python).requires_python


def install_script(recipe: Recipe, workdir: str, wheels: str) -> str:
    """The bash script run in the image build: venv, pip from its wheel, then one resolve of the
    declared requirements (``car-requirements.txt``), the lock's pins (``car-constraints.txt``)
    and the repository. Run it with ``PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheels>``."""
    q = shlex.quote
    lines = [
        "set -euxo pipefail",
        f"python3 -m venv --without-pip {VENV}",
        f"pip_wheel=$(ls {q(wheels)}/pip-*.whl | sort -V | tail -n 1)",
        f'{VENV}/bin/python "$pip_wheel/pip" install -q pip',
        f"export PATH={VENV}/bin:$PATH VIRTUAL_ENV={VENV}",
        "export " + " ".join(f"{k}={q(v)}" for k, v in recipe.environment().items()),
        f"cd {q(workdir)}",
    ]
    pip = f"python -m pip install -q -c {q(wheels)}/{CONSTRAINTS} -r {q(wheels)}/{REQUIREMENTS}"
    if recipe.install.startswith("python -m pip install -e ") and recipe.source == "generic":
        lines.append(f"{pip} {recipe.install.removeprefix('python -m pip install ')}")
    else:
        lines.append(pip)
        if recipe.install:
            lines.append(recipe.install)
    lines.append(f'python -c "import pytest" && cd {q(workdir)} && git status --short')
    return "\n".join(lines) + "\n"
