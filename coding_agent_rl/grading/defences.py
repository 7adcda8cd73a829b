"""Which tamper defences grading applies, and how each row's result is obtained.

Production grades with every defence on; the user's choices are ``tamper_policy``, ``twin``
(``--twin-grade``) and ``tamper_reward``. The switches let tests turn one layer off and show the
attack it stops then succeeds. :func:`result_method` picks ``plugin``, ``log``, ``exit_code`` or
``reward_file`` per row. Details: docs/modules/grading.md.
"""

from __future__ import annotations

import dataclasses
import re

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading.expansion import DEFAULT_MAX_EXPANDED
from coding_agent_rl.grading.screen import POLICIES
from coding_agent_rl.settings import default

PLUGIN_PARSERS = ("pytest", "junit", "swebench")
# `pytest ...`, `python3 -m pytest ...`, `py.test`, possibly after `cd x &&` / `source ...;`.
_PYTEST = re.compile(
    r"(?:^|[;&|]\s*|\s)(?:python[0-9.]*\s+(?:-[A-Za-z]+\s+)*-m\s+pytest|pytest|py\.test)(?:\s|$)"
)


@dataclasses.dataclass(frozen=True)
class Defences:
    plugin: bool = True  # result channel + exit-status agreement (pytest rows)
    canaries: bool = True  # generated must-fail / must-pass tests among the hidden ones
    blinding: bool = True  # random test names and order, same-type canary copies (False:
    # canaries named after their test, appended, ``(expected, <int>)``)
    canary_copies: int = 2  # must-fail copies per fail-to-pass test
    opposite_copies: bool = True  # a test with no expected value to edit: a copy asking the
    # opposite of its last check (truth checks, unittest pairs, raises blocks)
    gold_canaries: bool = True  # fresh-input canaries stored by ``validate --derive-canaries``
    twin: bool = default(
        "twin_grade"
    )  # grade twice in fresh sandboxes; hidden-test outcomes must agree
    tamper_reward: float = default(
        "tamper_reward"
    )  # the reward of a result with tampering evidence
    safe_path: bool = True  # PYTHONSAFEPATH: no working directory on sys.path (plugin rows)
    new_files: bool = True  # drop new test modules and new modules that shadow others
    fresh_control: bool = True  # control runs in a fresh sandbox, never where the agent ran
    reset_control: bool = True  # a reset that fails after the diff is re-run without it (model
    # when that works; False: every such failure is infra, as it was)
    strict_compare: bool = True  # hidden tests' comparisons under the grader's equality
    expansion_cap: int | None = DEFAULT_MAX_EXPANDED  # bytes a diff may write (None: no check)
    tamper_policy: str = default(
        "tamper_policy"
    )  # the static screen: zero | flag (| off: benchmarks only)

    def __post_init__(self) -> None:
        if self.tamper_policy not in (*POLICIES, "off"):
            raise ValueError(
                f"tamper policy {self.tamper_policy!r}: expected one of {', '.join(POLICIES)}"
            )


# The bare grader: results from the log, no safe path, no new-module rule, no canaries, no
# expansion bound, no screen; the control run in place. For benchmarks and "defence off" tests.
ROUND_1 = Defences(
    plugin=False,
    canaries=False,
    blinding=False,
    safe_path=False,
    new_files=False,
    fresh_control=False,
    reset_control=False,
    strict_compare=False,
    expansion_cap=None,
    tamper_policy="off",
)


def is_pytest_command(cmd: str) -> bool:
    return bool(_PYTEST.search(cmd))


def result_method(row: TaskRow, defences: Defences) -> str:
    """``plugin`` | ``log`` | ``exit_code`` | ``reward_file`` (see the module docstring)."""
    if row.grader == "eval_cmd":
        return "exit_code"
    if row.grader == "harbor":
        return "reward_file"
    pytest_row = row.log_parser in PLUGIN_PARSERS and (
        row.test_cmd is None or is_pytest_command(row.test_cmd)
    )
    return "plugin" if pytest_row and defences.plugin else "log"
