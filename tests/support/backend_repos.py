"""Tiny upstream repositories, one per build backend, each with a bug, its fix and a test that
catches it, committed with real git; and their SWE-bench rows.

``make_backend_repo(root, backend)`` writes ``root/car+<backend>`` (package ``tinylib``, flat
layout) whose packaging is what that backend's users write; ``BACKENDS`` lists them. The
version-from-git backends get no tag: their version can only come from the row.
"""

from __future__ import annotations

import json
import pathlib

from support.upstream import git

VERSION = "2.5.1"  # the rows' version; version-from-git backends must report it

_PROJECT = '[project]\nname = "tinylib"\nversion = "1.0.0"\ndescription = "tiny"\n'
_DYNAMIC = '[project]\nname = "tinylib"\ndynamic = ["version"]\ndescription = "tiny"\n'
FILES: dict[str, dict[str, str]] = {
    "flit": {
        "pyproject.toml": '[build-system]\nrequires = ["flit_core>=3.4,<5"]\n'
        'build-backend = "flit_core.buildapi"\n\n' + _PROJECT,
    },
    "hatchling": {
        "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
        'build-backend = "hatchling.build"\n\n' + _PROJECT,
    },
    "poetry": {
        "pyproject.toml": '[build-system]\nrequires = ["poetry-core>=1.0.0"]\n'
        'build-backend = "poetry.core.masonry.api"\n\n[tool.poetry]\nname = "tinylib"\n'
        'version = "1.0.0"\ndescription = "tiny"\nauthors = ["Dev <dev@example.invalid>"]\n\n'
        '[tool.poetry.dependencies]\npython = ">=3.8"\n',
    },
    "pdm": {
        "pyproject.toml": '[build-system]\nrequires = ["pdm-backend"]\n'
        'build-backend = "pdm.backend"\n\n' + _PROJECT,
    },
    "scm": {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm>=8"]\n'
        'build-backend = "setuptools.build_meta"\n\n' + _DYNAMIC + "\n[tool.setuptools]\n"
        'packages = ["tinylib"]\n\n[tool.setuptools_scm]\n',
    },
    "hatch-vcs": {
        "pyproject.toml": '[build-system]\nrequires = ["hatchling", "hatch-vcs"]\n'
        'build-backend = "hatchling.build"\n\n'
        + _DYNAMIC
        + '\n[tool.hatch.version]\nsource = "vcs"\n',
    },
    "setuptools": {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools>=64"]\n'
        'build-backend = "setuptools.build_meta"\n\n' + _PROJECT + "\n[tool.setuptools]\n"
        'packages = ["tinylib"]\n',
    },
    # No pyproject.toml: the legacy path, with a literal setup_requires that reads the version
    # from git.
    "setup-py": {
        "setup.py": "from setuptools import setup\n\nsetup(\n    name='tinylib',\n"
        "    packages=['tinylib'],\n    use_scm_version=True,\n"
        "    setup_requires=['setuptools-scm'],\n)\n",
    },
    "scikit-build": {
        "pyproject.toml": '[build-system]\nrequires = ["scikit-build-core>=0.10"]\n'
        'build-backend = "scikit_build_core.build"\n\n' + _PROJECT + "\n[tool.scikit-build]\n"
        'wheel.packages = ["tinylib"]\n',
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.15)\n"
        "project(${SKBUILD_PROJECT_NAME} LANGUAGES NONE)\n",
    },
}
BACKENDS = tuple(FILES)
VCS_VERSIONED = ("scm", "hatch-vcs", "setup-py")

BUGGY = '"""tinylib."""\n\n\ndef clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n'
FIXED = '"""tinylib."""\n\n\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n'
TESTS = """import importlib.metadata

import tinylib


def test_installed_from_the_repository():
    assert tinylib.__file__.startswith("/testbed/tinylib/"), tinylib.__file__


def test_version():
    assert importlib.metadata.version("tinylib") == {version!r}


def test_low():
    assert tinylib.clamp(-5, 0, 10) == 0
"""
NEW_TEST = "\n\ndef test_high():\n    assert tinylib.clamp(50, 0, 10) == 10\n"


def make_backend_repo(
    root: pathlib.Path, backend: str, *, name: str = "", extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The repository ``car/<name>`` (default: the backend's name) under ``root``, its files
    ``extra`` overriding the backend's; returns {'name', 'base', 'gold', 'test_patch'}."""
    name = name or backend
    path = root / f"car+{name}"
    (path / "tinylib").mkdir(parents=True)
    (path / "tests").mkdir()
    git(path, "init", "-q", "-b", "main")
    for file, text in {**FILES[backend], **(extra or {})}.items():
        (path / file).write_text(text)
    version = VERSION if backend in VCS_VERSIONED else "1.0.0"
    (path / "tinylib" / "__init__.py").write_text(BUGGY)
    (path / "tests" / "test_tiny.py").write_text(TESTS.format(version=version))
    git(path, "add", "-A")
    git(path, "commit", "-qm", "tinylib", date="2024-01-01T00:00:00Z")
    base = git(path, "rev-parse", "HEAD")
    (path / "tinylib" / "__init__.py").write_text(FIXED)
    git(path, "commit", "-qam", "fix clamp", date="2024-02-01T00:00:00Z")
    fix = git(path, "rev-parse", "HEAD")
    with (path / "tests" / "test_tiny.py").open("a") as f:
        f.write(NEW_TEST)
    git(path, "commit", "-qam", "test the high bound", date="2024-02-02T00:00:00Z")
    gold = git(path, "diff", base, fix, "--", "tinylib") + "\n"
    test_patch = git(path, "diff", fix, "HEAD", "--", "tests") + "\n"
    return {"name": name, "base": base, "gold": gold, "test_patch": test_patch}


def backend_record(up: dict[str, str], **extra: object) -> dict:
    """The SWE-bench row of a repository :func:`make_backend_repo` made (``car__<name>-1``)."""
    return {
        "repo": f"car/{up['name']}",
        "instance_id": f"car__{up['name']}-1",
        "base_commit": up["base"],
        "patch": up["gold"],
        "test_patch": up["test_patch"],
        "problem_statement": "clamp() ignores the upper bound: clamp(50, 0, 10) returns 0.\n",
        "hints_text": "",
        "created_at": "2024-01-15T10:00:00Z",
        "version": VERSION,
        "FAIL_TO_PASS": json.dumps(["tests/test_tiny.py::test_high"]),
        "PASS_TO_PASS": json.dumps(
            [
                "tests/test_tiny.py::test_installed_from_the_repository",
                "tests/test_tiny.py::test_version",
                "tests/test_tiny.py::test_low",
            ]
        ),
        "environment_setup_commit": up["base"],
        **extra,
    }
