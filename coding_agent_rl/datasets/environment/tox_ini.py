"""``tox.ini`` (or ``[tool.tox]`` legacy ini in ``pyproject.toml``): ``deps`` and ``extras`` of
``[testenv]``, factor-conditional lines (``unit: pytest``) kept when the factor is a test one
or the default environment's."""

from __future__ import annotations

import configparser
import pathlib
import re

from coding_agent_rl.datasets.environment import requirements_files as files
from coding_agent_rl.datasets.environment.model import DeclarationError, Declared, requirement

FILE = "tox.ini"
TEST_FACTORS = {"unit", "test", "tests", "testing", "py", "pytest"}
_FACTORED = re.compile(r"^([A-Za-z0-9_.,!{}-]+)\s*:\s+(.*)$")
_PY = re.compile(r"^(py\d*|pypy\d*)$")


def _wanted(factors: str) -> bool:
    """Whether a ``factors:`` condition (``a,b`` any-of, ``a-b`` all-of, ``!a`` not) holds for a
    plain test environment of CPython."""
    for alternative in factors.split(","):
        parts = [p for p in alternative.split("-") if p]
        if all(
            (p.startswith("!") and p[1:] not in TEST_FACTORS and not _PY.match(p[1:]))
            or (not p.startswith("!") and (p in TEST_FACTORS or _PY.match(p)))
            for p in parts
        ):
            return True
    return False


def _entries(value: str) -> list[str]:
    out = []
    for raw in value.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        m = _FACTORED.match(line)
        if m and "://" not in line and not re.match(r"^[A-Za-z0-9_.-]+\s*[<>=!~;]", line):
            if not _wanted(m.group(1)):
                continue
            line = m.group(2).strip()
        out.append(line)
    return out


def read(repo: pathlib.Path) -> Declared:
    found = Declared()
    path = repo / FILE
    if not path.is_file():
        return found
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read_string(path.read_text())
    except (configparser.Error, UnicodeDecodeError) as e:
        raise DeclarationError(f"{FILE}: not a valid ini file ({str(e).splitlines()[0]})") from None
    if not cfg.has_section("testenv"):
        return found
    src = f"{FILE} [testenv]"
    for entry in _entries(cfg.get("testenv", "deps", fallback="")):
        entry = entry.replace("{toxinidir}/", "").replace("{toxinidir}", ".")
        if entry.startswith(("-r", "-c", "-e", ".")):
            files.add_line(entry, repo, found)
            continue
        if entry.startswith("{"):
            found.notes.append(f"{src}: deps line {entry!r} not read")
            continue
        found.requirements.append(requirement(entry, src))
    found.extras += [
        e
        for line in _entries(cfg.get("testenv", "extras", fallback=""))
        for e in re.split(r"[,\s]+", line)
        if e
    ]
    if found.requirements or found.extras:
        found.sources.append(src)
    return found
