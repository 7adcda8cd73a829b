"""What a repository declares about its test environment: requirements with the file they came
from, lock pins, the project's extras, and what was left out and why."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

# Tools a test run never needs: an unobtainable pin of one of these is dropped, not fatal.
_NOT_FOR_TESTS = re.compile(
    r"^(mkdocs.*|mkautodoc|sphinx.*|furo|myst-parser|.*-sphinx-theme|pydata-sphinx-theme|cogapp|"
    r"ruff|black|isort|flake8.*|pylint|mypy|pyright|types-.*|.*-stubs|pre-commit.*|tox|tox-.*|"
    r"nox|twine|build|check-manifest|codespell|coverage-.*|gha-update)$"
)
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def name_of(spec: str) -> str:
    """The canonical project name of a requirement string ('' when it has none)."""
    m = _NAME.match(spec)
    return canonical(m.group(1)) if m else ""


class DeclarationError(ValueError):
    """A declaration file that cannot be read: the message is one line naming it."""


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One requirement string and where it was declared (``file`` or ``file [group]``)."""

    spec: str
    source: str
    optional: bool = False  # docs/lint-only: dropped, not fatal, when unobtainable

    @property
    def name(self) -> str:
        return name_of(self.spec)


def requirement(spec: str, source: str, optional: bool = False) -> Requirement:
    """A requirement, optional when it names a tool tests never need (or ``optional``: it comes
    from a docs or lint declaration)."""
    return Requirement(spec.strip(), source, optional or bool(_NOT_FOR_TESTS.match(name_of(spec))))


@dataclasses.dataclass
class Declared:
    """What one kind of declaration contributes."""

    requirements: list[Requirement] = dataclasses.field(default_factory=list)
    pins: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # name: (ver, src)
    extras: list[str] = dataclasses.field(default_factory=list)  # of the project itself
    requires_python: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (spec, src)
    sources: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Environment:
    """Everything the readers found, merged in precedence order."""

    requirements: list[Requirement] = dataclasses.field(default_factory=list)
    pins: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    extras: list[str] = dataclasses.field(default_factory=list)
    requires_python: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    sources: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def add(self, part: Declared) -> None:
        seen = {(r.spec, r.source) for r in self.requirements}
        self.requirements += [r for r in part.requirements if (r.spec, r.source) not in seen]
        for name, pin in part.pins.items():
            self.pins.setdefault(name, pin)  # the earlier (higher-precedence) lock wins
        self.extras += [e for e in part.extras if e not in self.extras]
        self.requires_python += part.requires_python
        self.sources += part.sources
        self.notes += part.notes

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
