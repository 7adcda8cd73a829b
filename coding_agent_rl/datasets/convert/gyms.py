"""SWE-smith and R2E-Gym records -> rows (their environments differ from SWE-bench's)."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

from coding_agent_rl.datasets.convert import (
    CONDA,
    DEFAULT_IMAGES,
    ConvertError,
    each_record,
    ids,
    image_fields,
    pytest_files,
)
from coding_agent_rl.patches.reverse import reverse_patch


def convert_swe_smith(rec: dict[str, Any], template: str) -> dict[str, Any]:
    """SWE-smith: the image holds the clean repository; ``patch`` *introduces* the bug.

    pre_commands apply it and restart history from a single commit (the buggy tree), so
    ``git show`` cannot reveal the fix; the gold patch is the bug patch reversed.
    """
    if not rec.get("image_name"):
        raise ConvertError("missing image_name")
    f2p, p2p = ids(rec.get("FAIL_TO_PASS")), ids(rec.get("PASS_TO_PASS"))
    bug = rec.get("patch") or ""
    if not bug.strip():
        raise ConvertError("missing patch (the bug-introducing diff)")
    marker = "CAR_BUG_PATCH_EOF"
    pre = (
        f"git apply --whitespace=nowarn <<'{marker}'\n{bug.rstrip()}\n{marker}\n"
        "git checkout -q --orphan car-task && git add -A && git commit -q --no-verify -m task"
    )
    return {
        "instance_id": rec["instance_id"],
        "repo": rec.get("repo"),
        "image": template.format(**image_fields(rec)),
        "workdir": "/testbed",
        "problem_statement": rec.get("problem_statement") or "",
        "pre_commands": pre,
        "patch": reverse_patch(bug),
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
        "test_cmd": f"{CONDA}python3 -m pytest -rA -p no:cacheprovider {' '.join(pytest_files(f2p + p2p))}",
    }


def _r2e_split(rec: dict[str, Any], expected: dict[str, str]) -> tuple[list[str], list[str]]:
    """F2P / P2P from the pre-fix log in ``execution_result_content``, when one is there."""
    from coding_agent_rl.datasets.logparse import canonical_id, parse_pytest

    passing = sorted(k.split(" - ")[0] for k, v in expected.items() if v == "PASSED")
    try:
        logs = json.loads(rec.get("execution_result_content") or "{}")
    except (TypeError, json.JSONDecodeError):
        logs = {}
    old_log = (
        next(
            (
                v
                for k, v in logs.items()
                if "old" in k and isinstance(v, str) and "short test summary info" in v
            ),
            None,
        )
        if isinstance(logs, dict)
        else None
    )
    if old_log is None:  # no split available: every expected pass must flip
        return passing, []
    before = {canonical_id("r2e", k): v for k, v in parse_pytest(old_log).items()}
    return [t for t in passing if before.get(t) != "PASSED"], [
        t for t in passing if before.get(t) == "PASSED"
    ]


def convert_r2e(rec: dict[str, Any], template: str) -> dict[str, Any]:
    """R2E-Gym: hidden tests live at /r2e_tests in the image; they are removed from the agent's
    sandbox and linked into the repository only for grading. Rows carry no gold diff."""
    if not rec.get("docker_image"):
        raise ConvertError("missing docker_image")
    expected = json.loads(rec.get("expected_output_json") or "{}")
    f2p, p2p = _r2e_split(rec, expected)
    if not f2p:
        raise ConvertError("no test is expected to pass")
    problem = rec.get("problem_statement") or ""
    m = re.search(r"\[ISSUE\](.*)\[/ISSUE\]", problem, re.S)
    iid = rec.get("instance_id") or rec["docker_image"].rsplit("/", 1)[-1]
    return {
        "instance_id": iid,
        "repo": rec.get("repo_name"),
        "image": template.format(**image_fields(rec)),
        "workdir": "/testbed",
        "problem_statement": (m.group(1) if m else problem).strip(),
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
        "log_parser": "r2e",
        "hidden_paths": ["/r2e_tests"],
        "protected_paths": ["/run_tests.sh", "/r2e_tests"],
        "test_cmd": "rm -rf r2e_tests && ln -s /r2e_tests r2e_tests && bash run_tests.sh",
    }


def convert_swe_smith_rows(
    in_path: pathlib.Path, out_dir: pathlib.Path, *, image_template: str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The swe-smith converter (registered in ``CONVERTERS``)."""
    template = image_template or DEFAULT_IMAGES["swe-smith"]
    return each_record(in_path, out_dir, template, convert_swe_smith)


def convert_r2e_rows(
    in_path: pathlib.Path, out_dir: pathlib.Path, *, image_template: str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The r2e-gym converter (registered in ``CONVERTERS``)."""
    return each_record(in_path, out_dir, image_template or DEFAULT_IMAGES["r2e-gym"], convert_r2e)
