"""Harbor task directories -> rows.

A Harbor task is a directory with ``instruction.md``, ``task.toml``, ``environment/Dockerfile``
(or ``[environment].docker_image``), ``tests/test.sh`` (writes ``/logs/verifier/reward.txt`` or
``reward.json``) and optionally ``solution/solve.sh``. The row keeps the tests on the host
(``harbor_tests_dir``, uploaded to ``/tests`` only in the grading sandbox), builds the image from
``environment/`` (``images build``), works in the Dockerfile's last ``WORKDIR`` (default ``/app``)
and carries ``solve.sh`` so that ``validate`` can produce the gold diff.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
from typing import Any

from coding_agent_rl.datasets.schema import parse_row

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

DEFAULT_TEMPLATE = "harbor/{task}:latest"
_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)", re.IGNORECASE | re.MULTILINE)


def task_dirs(path: pathlib.Path) -> list[pathlib.Path]:
    """``path`` itself when it is a task, else every task directory below it."""
    if (path / "task.toml").is_file():
        return [path]
    return sorted(p.parent for p in path.rglob("task.toml"))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "task"


def convert_task(task: pathlib.Path, out_dir: pathlib.Path, template: str) -> dict[str, Any]:
    config = tomllib.loads((task / "task.toml").read_text())
    env = config.get("environment") or {}
    name = str((config.get("task") or {}).get("name") or task.name)
    md: dict[str, Any] = {
        "instance_id": name,
        "problem_statement": (task / "instruction.md").read_text(),
        "harbor_tests_dir": os.path.relpath(task / "tests", out_dir),
    }
    dockerfile = task / "environment" / "Dockerfile"
    if env.get("docker_image"):
        md["image"] = env["docker_image"]
    else:
        if not dockerfile.is_file():
            raise ValueError("neither environment/Dockerfile nor [environment].docker_image")
        md["image"] = template.format(task=_slug(name.split("/")[-1]), instance_id=name)
        md["build"] = {
            "context": os.path.relpath(task / "environment", out_dir),
            "dockerfile": os.path.relpath(dockerfile, out_dir),
        }
    workdirs = _WORKDIR.findall(dockerfile.read_text()) if dockerfile.is_file() else []
    md["workdir"] = workdirs[-1] if workdirs and workdirs[-1].startswith("/") else "/app"
    timeout = (config.get("verifier") or {}).get("timeout_sec")
    if timeout:
        md["test_timeout"] = float(timeout)
    solve = task / "solution" / "solve.sh"
    if solve.is_file():
        md["solution_script"] = solve.read_text()
    return {"prompt": md["problem_statement"], "label": name, "metadata": md}


def convert_harbor(
    path: pathlib.Path, out_dir: pathlib.Path, *, image_template: str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    rows, skipped = [], []
    for task in task_dirs(path):
        try:
            row = convert_task(task, out_dir, image_template or DEFAULT_TEMPLATE)
            parse_row(row, base_dir=out_dir)
        except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as e:
            skipped.append(f"{task}: {e}")
            continue
        rows.append(row)
    if not rows and not skipped:
        skipped.append(f"{path}: no task.toml found")
    return rows, skipped
