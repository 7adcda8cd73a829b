"""Dataset rows: slime-style JSONL (``prompt`` / ``label`` / ``metadata``) parsed into ``TaskRow``.

Besides our flat metadata keys, slime's two shapes are read: ``metadata.remote_env_info``
(``image_url``, ``workdir``, ``f2p_script``, ``pre_commands``) and ``metadata.swepro``
(``fail_to_pass``, ``pass_to_pass``, ``selected_test_files``, ``before_repo_set_cmd``,
``run_script_path``, ``parser_script_path``). SWE-bench's upper-case ``FAIL_TO_PASS`` /
``PASS_TO_PASS`` (JSON-string lists) are accepted too. Every row is checked when the file is
loaded; a bad row raises :class:`DatasetError` naming the file, the line and the problem.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

from coding_agent_rl.datasets.buildspec import BuildSpec
from coding_agent_rl.datasets.fields import (
    build_spec,
    coerce_prompt,
    commands,
    file_text,
    first,
    read_host,
    str_list,
    test_ids,
)
from coding_agent_rl.datasets.log_parsers import needed_parser_hint
from coding_agent_rl.errors import TaskDataError
from coding_agent_rl.limits import parse_resources
from coding_agent_rl.patches.files import patch_paths

LOG_PARSERS = ("pytest", "junit", "swebench", "r2e", "swepro")


class DatasetError(TaskDataError):
    """A row that cannot be used; the message is one line: ``FILE:LINE: problem``."""


@dataclasses.dataclass(frozen=True)
class TaskRow:
    """One task, validated. Paths in ``build`` / ``harbor_tests_dir`` are absolute host paths."""

    instance_id: str
    image: str
    workdir: str
    problem_statement: str
    prompt: Any = None
    label: Any = None
    base_commit: str | None = None
    pre_commands: tuple[str, ...] = ()  # run in order with bash -e, in the workdir, as root
    patch: str | None = None
    test_patch: str | None = None
    test_cmd: str | None = None
    log_parser: str = "pytest"
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    test_files: tuple[str, ...] = ()
    protected_paths: tuple[str, ...] = ()
    hidden_paths: tuple[str, ...] = ()
    eval_cmd: str | None = None
    eval_script: str | None = None
    harbor_tests_dir: pathlib.Path | None = None
    swepro_run_script: str | None = None
    swepro_parser_script: str | None = None
    repo: str | None = None
    test_timeout: float | None = None
    build: BuildSpec | None = None
    # Sandbox limits this task needs instead of the run's (memory, cpus, pids, disk, nofile).
    resources: dict = dataclasses.field(default_factory=dict, compare=False)
    metadata: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    source: str = ""

    @property
    def grader(self) -> str:
        """Which grading protocol applies: ``tests`` | ``eval_cmd`` | ``harbor``."""
        if self.harbor_tests_dir is not None:
            return "harbor"
        if self.fail_to_pass:
            return "tests"
        return "eval_cmd"


def _runs_pytest(cmd: str) -> bool:
    return "pytest" in cmd or "py.test" in cmd


def _test_id_file(test_id: str) -> str | None:
    head = test_id.split("::", 1)[0]
    return head if head.endswith(".py") and "::" in test_id else None


def parse_row(obj: Any, *, base_dir: pathlib.Path, source: str = "") -> TaskRow:
    """Validate one decoded JSON row; raises ``ValueError`` with the problem (no location)."""
    if not isinstance(obj, dict):
        raise ValueError("row is not a JSON object")
    md = obj.get("metadata", obj)
    if not isinstance(md, dict):
        raise ValueError("metadata is not an object")
    rem = md.get("remote_env_info") or {}
    swepro = md.get("swepro") or {}
    if not isinstance(rem, dict) or not isinstance(swepro, dict):
        raise ValueError("remote_env_info / swepro must be objects")
    label = obj.get("label")
    instance_id = md.get("instance_id") or rem.get("instance_id")
    if not instance_id and isinstance(label, str) and 0 < len(label) < 256:
        instance_id = label
    if not instance_id:
        raise ValueError("missing instance_id")
    image = md.get("image") or rem.get("image_url") or md.get("docker_image")
    if not image or not isinstance(image, str):
        raise ValueError("missing image")
    workdir = md.get("workdir") or rem.get("workdir")
    if not workdir or not isinstance(workdir, str) or not workdir.startswith("/"):
        raise ValueError("missing workdir (an absolute path inside the image)")
    problem = file_text(md, "problem_statement", base_dir) or coerce_prompt(obj.get("prompt"))
    if not problem:
        raise ValueError("missing problem_statement (and no prompt to fall back on)")

    f2p = test_ids(
        first(md.get("fail_to_pass"), md.get("FAIL_TO_PASS"), swepro.get("fail_to_pass")),
        "fail_to_pass",
    )
    p2p = test_ids(
        first(md.get("pass_to_pass"), md.get("PASS_TO_PASS"), swepro.get("pass_to_pass")),
        "pass_to_pass",
    )
    test_patch = file_text(md, "test_patch", base_dir)
    gold = file_text(md, "patch", base_dir)
    pre = commands(md.get("pre_commands") or rem.get("pre_commands"), "pre_commands")
    before = swepro.get("before_repo_set_cmd")
    if before:
        pre = (str(before), *pre)
    log_parser = md.get("log_parser") or (
        "swepro" if swepro.get("parser_script_path") else "pytest"
    )
    if log_parser not in LOG_PARSERS:
        raise ValueError(f"unknown log_parser {log_parser!r} (known: {', '.join(LOG_PARSERS)})")

    swepro_run = swepro_parser = None
    if log_parser == "swepro":
        swepro_run = read_host(swepro.get("run_script_path"), base_dir, "swepro.run_script_path")
        swepro_parser = read_host(
            swepro.get("parser_script_path"), base_dir, "swepro.parser_script_path"
        )

    test_files = str_list(md.get("test_files") or swepro.get("selected_test_files"), "test_files")
    if not test_files:
        derived = list(patch_paths(test_patch)) if test_patch else []
        derived += [f for f in map(_test_id_file, f2p + p2p) if f]
        test_files = tuple(dict.fromkeys(derived))

    harbor_dir = None
    if md.get("harbor_tests_dir"):
        harbor_dir = (base_dir / md["harbor_tests_dir"]).resolve()
        if not (harbor_dir / "test.sh").is_file():
            raise ValueError(f"harbor_tests_dir {md['harbor_tests_dir']!r} has no test.sh")

    eval_cmd = md.get("eval_cmd")
    eval_script = rem.get("f2p_script") or md.get("eval_script")
    test_cmd = md.get("test_cmd")
    if harbor_dir is None and not f2p:
        if p2p:
            raise ValueError("pass_to_pass given but fail_to_pass is empty (F2P must be non-empty)")
        if not (eval_cmd or eval_script):
            raise ValueError(
                "no grading information (fail_to_pass, eval_cmd, f2p_script or harbor tests)"
            )
    if f2p and not test_cmd and log_parser not in ("swepro",) and not test_files:
        raise ValueError("fail_to_pass given but no test_cmd and no test files to run")
    if (
        not md.get("log_parser")
        and test_cmd
        and not _runs_pytest(str(test_cmd))
        and any("::" not in t for t in f2p + p2p)
    ):
        raise ValueError(
            f"test_cmd {str(test_cmd)[:60]!r} is not pytest and its test ids are not pytest node "
            f"ids: {needed_parser_hint(md.get('repo'))}"
        )
    if log_parser == "swebench" and not md.get("repo"):
        raise ValueError("log_parser 'swebench' needs metadata.repo (e.g. 'django/django')")

    hidden = str_list(md.get("hidden_paths"), "hidden_paths")
    for h in hidden:  # removing them inside the repo would make the two sandboxes' bases differ
        if (
            not h.startswith("/")
            or h.rstrip("/") == workdir.rstrip("/")
            or h.startswith(workdir.rstrip("/") + "/")
        ):
            raise ValueError(f"hidden path {h!r} must be absolute and outside the workdir")

    timeout = md.get("test_timeout")
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError("test_timeout must be a positive number of seconds")

    resources = parse_resources(md.get("resources"))

    return TaskRow(
        instance_id=str(instance_id),
        image=image,
        workdir=workdir.rstrip("/") or "/",
        problem_statement=problem,
        prompt=obj.get("prompt"),
        label=label,
        base_commit=md.get("base_commit") or None,
        pre_commands=pre,
        patch=gold,
        test_patch=test_patch,
        test_cmd=test_cmd,
        log_parser=log_parser,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        test_files=test_files,
        protected_paths=str_list(md.get("protected_paths"), "protected_paths"),
        hidden_paths=hidden,
        eval_cmd=eval_cmd,
        eval_script=eval_script,
        harbor_tests_dir=harbor_dir,
        swepro_run_script=swepro_run,
        swepro_parser_script=swepro_parser,
        repo=md.get("repo"),
        test_timeout=float(timeout) if timeout else None,
        build=build_spec(md.get("build"), base_dir),
        resources=resources,
        metadata=md,
        source=source,
    )


def row_from_sample(sample: Any, *, base_dir: str | pathlib.Path | None = None) -> TaskRow:
    """The row a slime ``Sample`` was made from (``prompt``, ``label``, ``metadata``).

    slime reads the JSONL itself, so file references (``patch_file`` ...) resolve against
    ``base_dir`` (the entry points pass ``settings.dataset_dir``), else the current directory.
    """
    base = base_dir or os.getcwd()
    obj = {"prompt": sample.prompt, "label": sample.label, "metadata": sample.metadata or {}}
    try:
        return parse_row(obj, base_dir=pathlib.Path(base), source=f"sample {sample.index}")
    except ValueError as e:
        raise DatasetError(f"sample {sample.index}: {e}") from None


def load_dataset(path: str | pathlib.Path) -> list[TaskRow]:
    """Read and validate every row of a JSONL file; the first bad row raises ``DatasetError``."""
    path = pathlib.Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise DatasetError(f"{path}: cannot read dataset: {e.strerror or e}") from None
    rows: list[TaskRow] = []
    seen: dict[str, int] = {}
    base_dir = path.resolve().parent
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
        try:
            row = parse_row(obj, base_dir=base_dir, source=where)
        except ValueError as e:
            raise DatasetError(f"{where}: {e}") from None
        if row.instance_id in seen:
            raise DatasetError(
                f"{where}: duplicate instance_id {row.instance_id!r} (first on line {seen[row.instance_id]})"
            )
        seen[row.instance_id] = lineno
        rows.append(row)
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return rows
