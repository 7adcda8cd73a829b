"""One environment resolver: what a repository declares about its test environment, read
without running it, each part recorded with the file it came from. One module per kind of
declaration; :data:`READERS` lists them in precedence order (another language's declarations
are one more module and one more line). Details: docs/modules/datasets.md."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

from coding_agent_rl.datasets.environment import locks, pyproject, requirements_files, tox_ini
from coding_agent_rl.datasets.environment.model import (
    DeclarationError,
    Declared,
    Environment,
    Requirement,
    canonical,
    name_of,
)
from coding_agent_rl.datasets.environment.python import mismatch

__all__ = [
    "READERS",
    "DeclarationError",
    "Environment",
    "Requirement",
    "canonical",
    "mismatch",
    "name_of",
    "resolve",
]

Reader = Callable[[pathlib.Path, str], Declared]
READERS: list[tuple[str, Reader]] = [
    ("lock", locks.read),
    ("pyproject", lambda repo, python: pyproject.read(repo)),
    ("requirements", lambda repo, python: requirements_files.read(repo)),
    ("tox", lambda repo, python: tox_ini.read(repo)),
]


def resolve(repo: pathlib.Path, python: str) -> Environment:
    """Everything ``repo`` declares, for the image's Python ``python`` (X.Y). Raises
    DeclarationError (one line naming the file) for a declaration that cannot be read."""
    env = Environment()
    for _, reader in READERS:
        env.add(reader(repo, python))
    return env
