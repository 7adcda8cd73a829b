"""Grading: capture the agent's diff, grade it in a fresh sandbox, resist reward hacking.

Agent side: ``base = await prepare_workspace(sb, row, agent=True)`` (pre_commands, snapshot,
hidden paths removed, git scrubbed), the agent works, ``await capture_diff(sb, row.workdir,
base_commit=base)``. Grader side: ``await grade(row, diff.text)`` -> :class:`GradeResult`, or
with a :class:`GradingSandbox` created and prepared while the agent works:
``await grade(row, diff.text, sandbox=ahead)``.
Note that ``coding_agent_rl.grading.grade`` is the function; the module is reached with
``importlib.import_module("coding_agent_rl.grading.grade")``.

Tamper evidence. The policy controls every byte of the diff, and the code it writes
runs inside the test process. Layers, each closing a class of forgery (:mod:`.defences` has
the switches):

==========================  =============================================================
protected paths             conftest.py, runner configs, start-up hooks, test files (protect)
expansion bound             a small patch that would write gigabytes (expansion)
new-module rule             new test modules; new modules shadowing the standard library,
                            an installed distribution or a repository module (pytest_plugin)
safe path                   PYTHONSAFEPATH: the working directory is not first on sys.path
result channel              our plugin, loaded before repository code, reports each test and
                            a final record over an inherited descriptor, HMAC-chained with a
                            per-run key the tests never see (pytest_plugin, channel)
exit-status agreement       pytest's real exit status must match the records (channel)
blinding                    every hidden test and canary runs under a fresh random name, in
                            shuffled order; the record maps names back (blinding, canaries)
canaries                    per fail-to-pass test, copies whose expected value is another of
                            the same type on a line with the original (perturb); must-pass one
static screen               _pytest, hooks, os._exit, atexit, gc.get_objects, ... (screen)
fresh-sandbox control runs  ambiguous failures re-run without the agent, never where its
                            code ran (protocols)
twin grading                ``--twin-grade``: graded twice, independent blinding; outcomes
                            must agree (twin)
tamper reward               ``--tamper-reward``: the reward of any result with evidence
==========================  =============================================================

What remains possible, and why: code in the test process can in principle read the key from
memory and sign records, or forge selected outcomes. Blinding makes selection a guess: a hidden
test and its copies differ only in an expected value on an evenly spaced line with the original
at a uniformly random place, so a forger that does not know the right value picks the original
with probability 1/3 per fail-to-pass test and is caught otherwise (with ``--tamper-reward -1``
forging loses in expectation). What it cannot stop: a forger that knows or guesses the right
value from its meaning (which is most of solving the task), tests without a literal expected
value (no copies; listed in ``blinding.unperturbed``), and files that cannot be rewritten safely
(``blinding.not_blinded``). See docs/grading.md. Rows whose ``test_cmd`` is not pytest are graded
from their log (``result_method: log``): the screen, the new-module rule and fresh control runs
apply, the channel and canaries do not. The disk a diff may fill is bounded here on the host;
the grading sandbox's own disk quota comes from the sandbox layer.

Robustness (docs/grading.md): every parser of agent input is total (patch paths split at ``\n``
only, malformed channel records are evidence, logs parse to fewer results); an unexpected
exception in a stage that handles agent input is the model's, with ``grader_error`` recorded
(grade.py). The screen runs off the event loop in a memory- and CPU-limited worker, its findings
capped; the diff capture ignores the repository's ``.gitattributes``; path lists travel as files,
never argv; the new-module rule also runs on the test process's configured ``sys.path``.
"""

from coding_agent_rl.grading.diff import CapturedDiff, DiffCaptureError, capture_diff
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.prepared import GradingSandbox
from coding_agent_rl.grading.result import GradeResult
from coding_agent_rl.grading.scrub import scrub_git
from coding_agent_rl.grading.workspace import WorkspaceError, prepare_workspace

__all__ = [
    "CapturedDiff",
    "DiffCaptureError",
    "GradeResult",
    "GradingSandbox",
    "WorkspaceError",
    "capture_diff",
    "grade",
    "prepare_workspace",
    "scrub_git",
]
