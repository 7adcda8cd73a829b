"""``pyproject.toml``: PEP 735 ``[dependency-groups]`` (``include-group`` followed), PEP 621
test extras, poetry / pdm / hatch dev groups, and ``requires-python``."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

from coding_agent_rl.datasets.environment.model import (
    DeclarationError,
    Declared,
    canonical,
    requirement,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

TEST_GROUPS = ("test", "tests", "testing")  # else "dev"
FILE = "pyproject.toml"


def load(repo: pathlib.Path) -> dict[str, Any]:
    path = repo / FILE
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise DeclarationError(f"{FILE}: not valid TOML ({e})") from None


def _pick(names: list[str]) -> list[str]:
    by = {canonical(n): n for n in names}
    chosen = [by[g] for g in TEST_GROUPS if g in by]
    return chosen or ([by["dev"]] if "dev" in by else [])


def group(groups: dict[str, Any], name: str, stack: tuple[str, ...] = ()) -> list[str]:
    """The requirement strings of dependency group ``name``, includes expanded."""
    by = {canonical(k): v for k, v in groups.items()}
    key = canonical(name)
    if key in stack:
        cycle = " -> ".join((*stack, key))
        raise DeclarationError(f"{FILE}: [dependency-groups] include-group cycle: {cycle}")
    if key not in by:
        raise DeclarationError(f"{FILE}: [dependency-groups] includes unknown group {name!r}")
    out: list[str] = []
    for item in by[key] or []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and "include-group" in item:
            out += group(groups, str(item["include-group"]), (*stack, key))
        else:
            raise DeclarationError(f"{FILE}: [dependency-groups] {name}: bad entry {item!r}")
    return out


def _poetry(spec: Any, name: str) -> str:
    if name == "python":
        return ""
    version = spec if isinstance(spec, str) else (spec or {}).get("version", "")
    version = str(version or "").strip()
    if version in ("", "*"):
        return name
    if version.startswith("^") or (version.startswith("~") and not version.startswith("~=")):
        return f"{name}>={version.lstrip('^~')}"  # the lower bound is what matters offline
    return f"{name}{version}" if version[0] in "<>=!~" else f"{name}=={version}"


def read(repo: pathlib.Path) -> Declared:
    data = load(repo)
    found = Declared()
    if not data:
        return found
    groups = data.get("dependency-groups") or {}
    for name in _pick(list(groups)):
        found.requirements += [
            requirement(s, f"{FILE} [dependency-groups] {name}") for s in group(groups, name)
        ]
        found.sources.append(f"{FILE} [dependency-groups] {name}")
    project = data.get("project") or {}
    optional = project.get("optional-dependencies") or {}
    for name in _pick(list(optional)):
        found.extras.append(name)
        found.sources.append(f"{FILE} [project.optional-dependencies] {name}")
    if project.get("requires-python"):
        found.requires_python.append((str(project["requires-python"]), f"{FILE} [project]"))
    tool = data.get("tool") or {}
    poetry = tool.get("poetry") or {}
    poetry_groups = {
        k: (v or {}).get("dependencies") or {} for k, v in (poetry.get("group") or {}).items()
    }
    picked = {n: poetry_groups[n] for n in _pick(list(poetry_groups))}
    if not picked and poetry.get("dev-dependencies"):
        picked = {"dev-dependencies": poetry["dev-dependencies"]}
    for name, deps in picked.items():
        src = f"{FILE} [tool.poetry] {name}"
        found.requirements += [requirement(s, src) for n, v in deps.items() if (s := _poetry(v, n))]
        found.sources.append(src)
    pdm = (tool.get("pdm") or {}).get("dev-dependencies") or {}
    for name in _pick(list(pdm)):
        src = f"{FILE} [tool.pdm.dev-dependencies] {name}"
        found.requirements += [requirement(s, src) for s in pdm[name] if not s.startswith("-e")]
        found.sources.append(src)
    envs = (tool.get("hatch") or {}).get("envs") or {}
    for name in _pick([n for n in envs if isinstance(envs[n], dict)]) or (
        ["default"] if isinstance(envs.get("default"), dict) else []
    ):
        src = f"{FILE} [tool.hatch.envs.{name}]"
        deps = envs[name].get("dependencies") or []
        found.requirements += [requirement(str(s), src) for s in deps]
        found.extras += [e for e in envs[name].get("features") or [] if isinstance(e, str)]
        if deps:
            found.sources.append(src)
    return found
