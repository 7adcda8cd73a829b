"""Fixtures for dataset tests: rows written in the real schemas of the source datasets."""

from __future__ import annotations

import json
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).parents[2] / "coding_agent_rl" / "datasets" / "examples"


@pytest.fixture
def swebench_records() -> list[dict]:
    """SWE-bench rows as the HF export has them (FAIL_TO_PASS / PASS_TO_PASS as JSON strings)."""
    return [
        {
            "repo": "astropy/astropy",
            "instance_id": "astropy__astropy-12907",
            "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
            "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n--- a/astropy/modeling/separable.py\n+++ b/astropy/modeling/separable.py\n@@ -242 +242 @@\n-        cright[-right.shape[0]:, -right.shape[1]:] = 1\n+        cright[-right.shape[0]:, -right.shape[1]:] = right\n",
            "test_patch": "diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py\n--- a/astropy/modeling/tests/test_separable.py\n+++ b/astropy/modeling/tests/test_separable.py\n@@ -1 +1,2 @@\n import pytest\n+import numpy\n",
            "problem_statement": "Modeling's `separability_matrix` does not compute separability correctly for nested CompoundModels",
            "hints_text": "",
            "created_at": "2022-03-03T15:14:54Z",
            "version": "4.3",
            "FAIL_TO_PASS": json.dumps(
                [
                    "astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]"
                ]
            ),
            "PASS_TO_PASS": json.dumps(
                ["astropy/modeling/tests/test_separable.py::test_coord_matrix"]
            ),
            "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
        },
        {
            "repo": "django/django",
            "instance_id": "django__django-11099",
            "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
            "patch": "diff --git a/x b/x\n",
            "test_patch": "",
            "problem_statement": "UsernameValidator allows trailing newline",
            "version": "3.0",
            "FAIL_TO_PASS": json.dumps(
                ["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]
            ),
            "PASS_TO_PASS": "[]",
        },
    ]
