"""``requirements*.txt`` and ``requirements/*.txt``: ``-r`` / ``-c`` followed, ``-e .`` and
``-e .[extra]`` (relative to the file, so to the repository) become the project's own extras,
pins of pip-compile output also become lock pins."""

from __future__ import annotations

import pathlib
import re

from coding_agent_rl.datasets.environment.model import (
    DeclarationError,
    Declared,
    canonical,
    requirement,
)

TOP = (
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "requirements-tests.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "test_requirements.txt",
    "dev-requirements.txt",
)
IN_FOLDER = ("test.txt", "tests.txt", "testing.txt", "dev.txt")  # under requirements/
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)\s*(;.*)?$")
_EXTRAS = re.compile(r"^(.*?)(\[([^\]]*)\])?$")
# A file for the docs or lint environment (requirements/docs.txt, requirements-typing.txt): what
# only it declares is optional, even when a dev file pulls it in with -r.
_NOT_FOR_TESTS_FILE = re.compile(r"(^|[-_/])(docs?|documentation|typing|lint|style|mypy)(\.|[-_/])")


def _lines(path: pathlib.Path) -> list[str]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DeclarationError(f"{path.name}: cannot be read ({e})") from None
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.append(line)
    return out


def read_file(
    path: pathlib.Path,
    repo: pathlib.Path,
    into: Declared,
    seen: set[tuple[pathlib.Path, bool]],
    pins: bool,
    optional: bool = False,
) -> None:
    """Add ``path``'s requirements (``pins``: its ``==`` lines are constraints only; ``optional``:
    they are not for tests) to ``into``. ``seen``: (file, optional) pairs read; a file shared by
    a docs file and a test file is read again for the tests, so what it declares is required."""
    path = path.resolve()
    if (path, False) in seen or (path, optional) in seen:
        return
    try:
        rel = str(path.relative_to(repo.resolve()))
    except ValueError:
        seen.add((path, optional))
        into.notes.append(f"{path}: outside the repository, not read")
        return
    optional = optional or bool(_NOT_FOR_TESTS_FILE.search(rel))
    if (path, optional) in seen:
        return
    seen.add((path, optional))
    if not path.is_file():
        raise DeclarationError(f"{rel}: named by -r/-c but missing")
    if rel not in into.sources:
        into.sources.append(rel)
    compiled = "pip-compile" in path.read_text(errors="replace")[:2000]
    for line in _lines(path):
        option, _, arg = line.partition(" ")
        arg = arg.strip()
        if option in ("-r", "--requirement", "-c", "--constraint"):
            c = pins or option.startswith(("-c", "--c"))
            read_file(path.parent / arg, repo, into, seen, c, optional)
        elif option in ("-e", "--editable") or line.startswith((".", "/")):
            target = arg if option in ("-e", "--editable") else line
            where, _, extras = _EXTRAS.match(target).groups()  # type: ignore[union-attr]
            if (path.parent / where).resolve() == repo.resolve():
                into.extras += [e.strip() for e in (extras or "").split(",") if e.strip()]
            else:
                into.notes.append(f"{rel}: local project {target} not installed")
        elif line.startswith("-"):
            continue  # --index-url, --hash, --find-links...: the offline set replaces them
        elif "://" in line or line.startswith("git+"):
            into.notes.append(f"{rel}: {line} (a URL) not installed: builds are offline")
        else:
            m = _PIN.match(line)
            if m and (pins or compiled):
                into.pins.setdefault(canonical(m.group(1)), (m.group(3), rel))
            if not pins:
                into.requirements.append(requirement(line, rel, optional))


def add_line(line: str, repo: pathlib.Path, into: Declared) -> None:
    """One requirements-file line given elsewhere (tox ``deps``), relative to the repository."""
    option, _, arg = line.partition(" ")
    arg = arg.strip()
    if option in ("-r", "--requirement", "-c", "--constraint"):
        read_file(repo / arg, repo, into, set(), pins=option.startswith(("-c", "--c")))
        return
    target = arg if option in ("-e", "--editable") else line
    where, _, extras = _EXTRAS.match(target).groups()  # type: ignore[union-attr]
    if (repo / where).resolve() == repo.resolve():
        into.extras += [e.strip() for e in (extras or "").split(",") if e.strip()]
    else:
        into.notes.append(f"local project {target} not installed")


def read(repo: pathlib.Path) -> Declared:
    found = Declared()
    seen: set[tuple[pathlib.Path, bool]] = set()
    files = [repo / f for f in TOP] + [repo / "requirements" / f for f in IN_FOLDER]
    for path in files:
        if path.is_file():
            read_file(path, repo, found, seen, pins=False)
    return found
