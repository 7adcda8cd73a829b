"""How a repository's Python environment is installed in its container image: a venv at
``/opt/venv`` with pytest and the repository in development mode.

The recipe comes from the row's ``install_config``, else the ``swebench`` specs, else a generic
one; builds are offline (wheels downloaded on the host). Details: docs/modules/datasets.md.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex
import sys
from typing import Any

from coding_agent_rl.datasets.build_requires import build_requirements

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

VENV = "/opt/venv"
ALWAYS = ("pip", "setuptools", "wheel", "pytest")
REQUIREMENT_FILES = (
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "dev-requirements.txt",
)
TEST_EXTRAS = ("test", "tests", "testing")
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
    requirement_files: tuple[str, ...] = ()  # repository-relative
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
    return Recipe(
        source=source,
        packages=tuple(packages),
        requirement_files=tuple(files),
        install=install,
        extras=_extras_of(install),
        notes=tuple(notes),
    )


def generic(repo_dir: pathlib.Path) -> Recipe:
    """requirements files, then the repository in development mode with its test extra."""
    files = tuple(f for f in REQUIREMENT_FILES if (repo_dir / f).is_file())
    installable = any((repo_dir / f).is_file() for f in ("pyproject.toml", "setup.py", "setup.cfg"))
    if not installable:
        return Recipe("generic", requirement_files=files, notes=("no setup file: not installed",))
    extras: tuple[str, ...] = ()
    pyproject = repo_dir / "pyproject.toml"
    if pyproject.is_file():
        try:
            declared = tomllib.loads(pyproject.read_text()).get("project", {})
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            declared = {}
        optional = declared.get("optional-dependencies") or {}
        extras = tuple(e for e in TEST_EXTRAS if e in optional)[:1]
    target = f".[{','.join(extras)}]" if extras else "."
    return Recipe(
        "generic",
        requirement_files=files,
        install=f"python -m pip install -e {shlex.quote(target)}",
        extras=extras,
    )


def pretend_version(version: Any) -> str:
    """The row's ``version`` when it is a PEP 440 version, else ``0.0.0``."""
    text = str(version or "").strip().lstrip("v")
    return text if _PEP440.match(text) else "0.0.0"


def recipe_for(metadata: dict[str, Any], repo_dir: pathlib.Path) -> Recipe:
    """The recipe for a row (its metadata) whose repository is checked out at ``repo_dir``.
    Raises ValueError for a ``pyproject.toml`` that is not TOML."""
    declared = declared_spec(metadata)
    recipe = from_spec(*declared, repo_dir) if declared else generic(repo_dir)
    needs = build_requirements(repo_dir).requires if recipe.install else ()
    return dataclasses.replace(
        recipe, build_requires=needs, version=pretend_version(metadata.get("version"))
    )


def install_script(recipe: Recipe, workdir: str, wheels: str) -> str:
    """The bash script run in the image build: venv, pip from its wheel, packages, repository.
    Run it with ``PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheels>``."""
    q = shlex.quote
    lines = [
        "set -euxo pipefail",
        f"python3 -m venv --without-pip {VENV}",
        f"pip_wheel=$(ls {q(wheels)}/pip-*.whl | sort -V | tail -n 1)",
        f'{VENV}/bin/python "$pip_wheel/pip" install -q pip',
        f"export PATH={VENV}/bin:$PATH VIRTUAL_ENV={VENV}",
        "export " + " ".join(f"{k}={q(v)}" for k, v in recipe.environment().items()),
        "python -m pip install -q " + " ".join(q(p) for p in (*ALWAYS[1:], *recipe.packages)),
        f"cd {q(workdir)}",
    ]
    lines += [f"python -m pip install -q -r {q(f)}" for f in recipe.requirement_files]
    if recipe.install:
        lines.append(recipe.install)
    lines.append(f'python -c "import pytest" && cd {q(workdir)} && git status --short')
    return "\n".join(lines) + "\n"
