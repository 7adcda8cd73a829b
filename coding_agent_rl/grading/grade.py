"""Grade an agent's diff in a fresh sandbox from the task's image, network off.

Only the diff crosses over from the agent sandbox. Steps: prepare the base (pre_commands, snapshot
commit); drop from the diff every file section on a protected path (protect.py); apply the rest
as the unprivileged test user with the ladder (apply.py); revert any protected path that still
changed on disk; reset ``test_files`` to the base (files the agent created there are deleted);
apply ``test_patch``; run the tests / ``eval_cmd`` / Harbor's ``tests/test.sh``; parse; score.
The steps before the diff depend on the row alone: a :class:`GradingSandbox` (prepared.py) does
them ahead, while the agent works.

Infra vs model (``failure_kind``):

=====================================================  ========
sandbox cannot be created / dies / exec fails          infra
pre_commands, test-file reset or test_patch fail       infra
parser package missing (``swebench``)                  infra
empty diff, diff over the cap, only protected files    model
diff does not apply (every rung failed)                model
tests ran, some required test not PASSED               model
no result parsed, or the run timed out: *control run*  model if the control run (same sandbox,
  with the agent's changes reverted) gives results;    infra otherwise
=====================================================  ========

The control run settles the ambiguous cases: an agent whose code hangs or kills the test process
is scored (model), while a harness that never works (bad ``test_cmd``, broken image) is not
blamed on the model. Validated rows (validate.py) finish and parse without the gold patch, so the
control run only fails for a real infrastructure problem.
"""

from __future__ import annotations

import logging
import shlex
import time
from typing import TYPE_CHECKING, Any

from coding_agent_rl.grading.apply import apply_patch
from coding_agent_rl.grading.diff import DEFAULT_MAX_BYTES
from coding_agent_rl.grading.parsers import ParserUnavailable
from coding_agent_rl.grading.patchfiles import filter_patch, patch_paths, path_matches
from coding_agent_rl.grading.prepared import (
    GradingSandbox,
    Prepared,
    prepare_grading,
    sandbox_options_for,
)
from coding_agent_rl.grading.protect import protected_patterns
from coding_agent_rl.grading.protocols import Graded, run_eval, run_harbor, run_tests
from coding_agent_rl.grading.result import GradeResult, GradingDone, cap_log, fail
from coding_agent_rl.grading.runner import TEST_UID
from coding_agent_rl.grading.workspace import (
    GIT,
    WorkspaceError,
    emit_list,
    list_script,
    parse_list,
    restore_script,
    run_checked,
)
from coding_agent_rl.sandbox import SandboxError, create_sandbox

if TYPE_CHECKING:  # the schema imports grading.patchfiles; avoid the cycle at runtime
    from coding_agent_rl.datasets.schema import TaskRow

log = logging.getLogger(__name__)
q = shlex.quote
__all__ = ["GradingSandbox", "grade", "sandbox_options_for"]


async def grade(
    row: TaskRow,
    diff: str | bytes,
    *,
    backend: str = "docker",
    sandbox_options: dict[str, Any] | None = None,
    timeout: float = 600,
    allow_empty: bool = False,
    max_diff_bytes: int = DEFAULT_MAX_BYTES,
    extra_protected: tuple[str, ...] = (),
    sandbox: GradingSandbox | None = None,
) -> GradeResult:
    """Grade ``diff`` for ``row``; never raises for a per-sample failure (see ``failure_kind``).

    ``timeout`` bounds the test command (a row's ``test_timeout`` wins). ``allow_empty`` grades
    an empty diff instead of scoring it 0 at once (the validator uses it for the no-op run).
    ``sandbox``: a :class:`GradingSandbox` for ``row`` prepared ahead (``backend`` and
    ``sandbox_options`` are then its own); it grades this one diff, and its owner destroys it
    (``async with`` / ``close()``), so that teardown can leave the caller's critical path.
    """
    if sandbox is not None:
        if sandbox.row.instance_id != row.instance_id or sandbox.used:
            raise ValueError("a GradingSandbox grades one diff of its own row")
        sandbox.used = True
    t0 = time.monotonic()
    result = GradeResult(grader=row.grader)
    data = diff.encode("utf-8", "surrogateescape") if isinstance(diff, str) else diff
    try:
        if len(data) > max_diff_bytes:
            fail(result, "model", f"diff is {len(data)} bytes, over the {max_diff_bytes}-byte cap")
        if not data.strip() and not allow_empty:
            fail(result, "model", "empty diff")
        patterns = protected_patterns(row, extra=extra_protected)
        kept, dropped = filter_patch(data.decode("utf-8", "surrogateescape"), patterns)
        result.protected_paths_touched = dropped
        if data.strip() and not kept.strip() and not allow_empty:
            fail(result, "model", f"diff only changes protected paths: {', '.join(dropped[:5])}")
        kept_data = kept.encode("utf-8", "surrogateescape")
        if sandbox is not None:
            prepared = await sandbox.ready()
            await _grade_in(prepared, row, kept_data, patterns, result, row.test_timeout or timeout)
        else:
            opts = sandbox_options_for(backend, sandbox_options, row)
            async with create_sandbox(backend, image=row.image, **opts) as sb:
                prepared = await prepare_grading(sb, row)
                await _grade_in(
                    prepared, row, kept_data, patterns, result, row.test_timeout or timeout
                )
    except GradingDone:
        pass
    except (SandboxError, WorkspaceError, ParserUnavailable) as e:
        result.reward, result.failure_kind, result.reason = 0.0, "infra", f"{type(e).__name__}: {e}"
    except Exception as e:  # a grader bug must not be scored as the model's failure
        log.exception("grading %s failed unexpectedly", row.instance_id)
        result.reward, result.failure_kind = 0.0, "infra"
        result.reason = f"internal grading error: {type(e).__name__}: {e}"
    result.duration_s = round(time.monotonic() - t0, 3)
    return result


# The hidden tests must apply to the base as they are: git apply, else patch (no --3way).
_TEST_PATCH = """if ! {git} apply --whitespace=nowarn {tp} > {tp}.log 2>&1; then
  {undo}
  if ! patch --batch --fuzz=5 -p1 --forward --no-backup-if-mismatch -i {tp} >> {tp}.log 2>&1; then
    echo "test_patch does not apply:" >&2; tail -c 1500 {tp}.log >&2; exit 1
  fi
fi
"""


async def _grade_in(
    prepared: Prepared,
    row: TaskRow,
    kept: bytes,
    patterns: list[str],
    result: GradeResult,
    timeout: float,
) -> None:
    # Steps are joined into few execs: every exec is a round trip to the sandbox.
    sb, runner, base, before = prepared.sb, prepared.runner, prepared.base, prepared.before
    wd = row.workdir
    agent_paths: list[str] = []
    reset = False
    if kept.strip():
        outcome = await apply_patch(
            sb,
            wd,
            kept,
            base=base,
            patch_path=f"{runner.dir}/agent.diff",
            runner=runner.prefix,
            then=_after_apply(prepared, row, kept, patterns),
        )
        if not outcome.ok:
            result.test_log = cap_log(outcome.log)
            fail(
                result,
                "model",
                "diff does not apply (git apply, --3way and patch --fuzz all failed)",
            )
        result.apply_method = outcome.method
        agent_paths = sorted(parse_list(outcome.then_output) - before)
        reset = outcome.then_output.startswith(RESET_MARK + "\n")
    # Defence in depth: whatever protected path changed on disk (however the patch spelled it)
    # goes back to the base, together with the declared test files.
    sneaked = [p for p in agent_paths if path_matches(p, patterns)]
    if sneaked:
        if reset:  # the in-exec check let only named, unprotected paths through
            raise WorkspaceError(f"grader invariant broken: protected paths {sneaked[:5]} changed")
        result.protected_paths_touched = list(
            dict.fromkeys(result.protected_paths_touched + sneaked)
        )
    if not reset:
        await run_checked(
            sb,
            _reset_script(prepared, row, sneaked),
            "resetting test files and applying test_patch",
        )
    graded = Graded(sb, row, runner, base, agent_paths, result, timeout)
    protocol = {"harbor": run_harbor, "eval_cmd": run_eval, "tests": run_tests}[row.grader]
    await protocol(graded)


def _reset_script(prepared: Prepared, row: TaskRow, sneaked: list[str]) -> str:
    """Put ``sneaked`` and the test files back to the base, apply the test patch, hand the tree
    to the test user."""
    wd, base, runner = row.workdir, prepared.base, prepared.runner
    script = f"cd {q(wd)}\n" + restore_script(base, sneaked + list(row.test_files))
    if row.test_patch:
        assert prepared.test_diff is not None
        undo = restore_script(base, patch_paths(row.test_patch))
        script += _TEST_PATCH.format(git=GIT, tp=q(prepared.test_diff), undo=undo or ":")
    if runner.as_user:  # files the test patch created belong to root; hand them over too
        script += f"chown -R {TEST_UID}:{TEST_UID} {q(wd)}\n"
    return script


RESET_MARK = "CAR-RESET"
_INLINE_NAMES_BYTES = 32 * 1024  # the named paths travel on the command line


def _after_apply(prepared: Prepared, row: TaskRow, kept: bytes, patterns: list[str]) -> str:
    """The script run right after the diff applied: list what changed and, when that is only
    paths the diff names (none protected: the filter dropped those), reset the test files and
    apply the test patch in the same exec, printing :data:`RESET_MARK` first. Anything else
    (or no ``comm -z`` in the image) leaves the reset to a separate exec, as before."""
    d = prepared.runner.dir
    after, named, known, unexpected = (f"{d}/{n}.z" for n in ("after", "named", "known", "extra"))
    script = list_script(prepared.base, save=after, emit=False)
    names = patch_paths(kept.decode("utf-8", "surrogateescape"))
    words = " ".join(q(n) for n in names)
    if len(words) <= _INLINE_NAMES_BYTES and not any(path_matches(n, patterns) for n in names):
        reset = _reset_script(prepared, row, [])
        c = "LC_ALL=C"
        script += (
            f"printf '%s\\0' {words} > {q(named)}\n"
            f"if {c} sort -zu {q(prepared.before_file)} {q(named)} > {q(known)} 2>/dev/null &&"
            f" {c} sort -zu {q(after)} | {c} comm -z -23 - {q(known)} > {q(unexpected)} 2>/dev/null"
            f" && [ ! -s {q(unexpected)} ]; then\n"
            f"  echo {RESET_MARK}\n  ( set -e\n{reset}) || exit $?\nfi\n"
        )
    return script + emit_list(after)
