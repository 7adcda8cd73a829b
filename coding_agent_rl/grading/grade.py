"""Grade an agent's diff in a fresh sandbox from the task's image, network off.

Only the diff crosses over from the agent sandbox. The steps (each a defence), which failures
are the model's and which are infrastructure's, and when the fresh-sandbox control run settles
an ambiguous result: docs/modules/grading.md.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from typing import Any

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import FailureKind, GradingError
from coding_agent_rl.grading.after_apply import (
    LIST_MARK,
    RESET_MARK,
    after_apply_script,
    record_drops,
    screen_post_images,
)
from coding_agent_rl.grading.apply import AfterApplyError, apply_patch
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.diff import DEFAULT_MAX_BYTES
from coding_agent_rl.grading.expansion import expansion_problem
from coding_agent_rl.grading.prepared import (
    GradingSandbox,
    Prepared,
    prepare_grading,
    sandbox_options_for,
)
from coding_agent_rl.grading.protect import protected_patterns
from coding_agent_rl.grading.protocols import (
    Graded,
    run_eval,
    run_harbor,
    run_tests,
    settle_reset,
)
from coding_agent_rl.grading.result import GradeResult, cap_log, fail
from coding_agent_rl.grading.screen import screened_files
from coding_agent_rl.grading.twin import apply_tamper_reward, combine
from coding_agent_rl.grading.workspace import (
    WorkspaceError,
    parse_list,
    restore_list,
    run_checked,
)
from coding_agent_rl.patches.files import filter_patch, path_matches
from coding_agent_rl.sandbox import SandboxError, SandboxGone, create_sandbox
from coding_agent_rl.settings import default

log = logging.getLogger(__name__)
q = shlex.quote
__all__ = ["Defences", "GradingSandbox", "grade", "sandbox_options_for"]


async def grade(
    row: TaskRow,
    diff: str | bytes,
    *,
    backend: str = "docker",
    sandbox_options: dict[str, Any] | None = None,
    timeout: float = default("eval_timeout_s"),
    allow_empty: bool = False,
    max_diff_bytes: int = DEFAULT_MAX_BYTES,
    extra_protected: tuple[str, ...] = (),
    sandbox: GradingSandbox | None = None,
    defences: Defences | None = None,
    twin: bool | None = None,
) -> GradeResult:
    """Grade ``diff`` for ``row``; never raises for a per-sample failure (see ``failure_kind``).

    ``timeout`` bounds the test command (a row's ``test_timeout`` wins). ``allow_empty`` grades
    an empty diff instead of scoring it 0 at once (the validator uses it for the no-op run).
    ``sandbox``: a :class:`GradingSandbox` for ``row`` prepared ahead (``backend``,
    ``sandbox_options`` and ``defences`` are then its own); it grades this one diff, and its
    owner destroys it (``async with`` / ``close()``), so that teardown can leave the caller's
    critical path. ``defences``: all on by default (see :class:`Defences`). ``twin``: grade
    twice (None: as ``defences.twin`` says; see twin.py).
    """
    chosen = (sandbox.defences if sandbox is not None else defences) or Defences()
    if twin if twin is not None else chosen.twin:
        once: dict[str, Any] = dict(backend=backend, sandbox_options=sandbox_options)
        once.update(timeout=timeout)
        once.update(allow_empty=allow_empty, max_diff_bytes=max_diff_bytes, twin=False)
        once.update(extra_protected=extra_protected, defences=chosen)
        if sandbox is not None:
            once.update(backend=sandbox.backend, sandbox_options=sandbox.sandbox_options)
        pair = await asyncio.gather(
            grade(row, diff, **{**once, "sandbox": sandbox}), grade(row, diff, **once)
        )
        return apply_tamper_reward(combine(*pair), chosen)
    if sandbox is not None:
        if sandbox.row.instance_id != row.instance_id or sandbox.used:
            raise ValueError("a GradingSandbox grades one diff of its own row")
        sandbox.used = True
        backend, sandbox_options, defences = (
            sandbox.backend,
            sandbox.sandbox_options,
            sandbox.defences,
        )
    defences = defences or Defences()
    t0 = time.monotonic()
    result = GradeResult(grader=row.grader)
    data = diff.encode("utf-8", "surrogateescape") if isinstance(diff, str) else diff
    try:
        await _grade(
            row,
            data,
            result,
            backend,
            sandbox_options,
            timeout,
            allow_empty,
            max_diff_bytes,
            extra_protected,
            sandbox,
            defences,
        )
    except (SandboxError, GradingError) as e:  # WorkspaceError, ParserUnavailable, ...
        result.reward, result.failure_kind, result.reason = 0.0, "infra", f"{type(e).__name__}: {e}"
    except Exception as e:  # charged by stage (module docstring)
        _unexpected(row, result, e)
    result.cap()
    result.duration_s = round(time.monotonic() - t0, 3)
    return apply_tamper_reward(result, defences)


AGENT_STAGES = ("diff", "apply", "screen", "reset", "tests")


def _unexpected(row: TaskRow, result: GradeResult, e: Exception) -> None:
    stage = result.stage or "diff"
    message = _safe_str(e)[:500]
    kind: FailureKind = "model" if stage in AGENT_STAGES else "infra"
    log.warning(
        "grading %s: %s in stage %s (%s): %s",
        row.instance_id,
        type(e).__name__,
        stage,
        kind,
        message[:200],
        exc_info=kind == "infra",
    )
    result.reward, result.failure_kind, result.done = 0.0, kind, True
    result.reason = f"grader error in stage {stage}: {type(e).__name__}: {message}"
    if kind == "model":
        result.grader_error = {"stage": stage, "type": type(e).__name__, "message": message}


def _safe_str(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:  # an exception whose message itself fails
        return repr(type(e))


async def _grade(
    row: TaskRow,
    data: bytes,
    result: GradeResult,
    backend: str,
    sandbox_options: dict[str, Any] | None,
    timeout: float,
    allow_empty: bool,
    max_diff_bytes: int,
    extra_protected: tuple[str, ...],
    sandbox: GradingSandbox | None,
    defences: Defences,
) -> None:
    """:func:`grade`'s steps; each one that ends grading returns with ``result`` final."""
    result.stage = "diff"
    if len(data) > max_diff_bytes:
        fail(result, "model", f"diff is {len(data)} bytes, over the {max_diff_bytes}-byte cap")
        return
    if not data.strip() and not allow_empty:
        fail(result, "model", "empty diff")
        return
    text = data.decode("utf-8", "surrogateescape")
    patterns = protected_patterns(row, extra=extra_protected)
    kept, dropped = filter_patch(text, patterns)
    result.protected_paths_touched = dropped
    if data.strip() and not kept.strip() and not allow_empty:
        fail(result, "model", f"diff only changes protected paths: {', '.join(dropped[:5])}")
        return
    if defences.expansion_cap is not None and (
        problem := expansion_problem(kept, defences.expansion_cap)
    ):
        fail(result, "model", problem)
        return
    kept_data = kept.encode("utf-8", "surrogateescape")
    timeout = row.test_timeout or timeout
    if sandbox is not None:
        result.stage = "prepare"
        prepared = await sandbox.ready()
        await _grade_in(prepared, row, kept_data, patterns, result, timeout, defences, sandbox)
    else:
        opts = sandbox_options_for(backend, sandbox_options, row)
        result.stage = "prepare"
        async with create_sandbox(backend, image=row.image, **opts) as sb:
            prepared = await prepare_grading(sb, row, defences)
            where = (backend, sandbox_options)
            await _grade_in(prepared, row, kept_data, patterns, result, timeout, defences, where)


async def _grade_in(
    prepared: Prepared,
    row: TaskRow,
    kept: bytes,
    patterns: list[str],
    result: GradeResult,
    timeout: float,
    defences: Defences,
    where: GradingSandbox | tuple[str, dict[str, Any] | None],
) -> None:
    # Steps are joined into few execs: every exec is a round trip to the sandbox.
    sb, runner, before = prepared.sb, prepared.runner, prepared.before
    result.result_method = prepared.method
    result.canaries = len(prepared.canaries)
    result.blinding = prepared.blinding.record() if prepared.canaries else None
    result.compare_notes = list(prepared.compare_notes[:20])
    agent_paths: list[str] = []
    reset = False
    if kept.strip():
        result.stage = "apply"
        kept_text = kept.decode("utf-8", "surrogateescape")
        # off the loop: the diff is the agent's, up to its cap, and parsing it takes CPU
        sources = (
            {}
            if defences.tamper_policy == "off"
            else await asyncio.to_thread(screened_files, kept_text)
        )
        try:
            outcome = await apply_patch(
                sb,
                row.workdir,
                kept,
                base=prepared.base,
                patch_path=f"{runner.dir}/agent.diff",
                runner=runner.prefix,
                then=after_apply_script(prepared, row, kept_text, patterns, sources, defences),
            )
        except AfterApplyError as e:  # the in-exec reset, after the diff went in
            result.stage = "reset"
            await settle_reset(row, result, e, where, defences)
            return
        if not outcome.ok:
            result.test_log = cap_log(outcome.log)
            fail(
                result,
                "model",
                "diff does not apply (git apply, --3way and patch --fuzz all failed)",
            )
            return
        result.apply_method = outcome.method
        head, _, _ = outcome.then_output.partition(f"{LIST_MARK}\n")
        agent_paths = sorted(parse_list(outcome.then_output) - before)
        reset = RESET_MARK in head.split("\n")  # not splitlines: a path may hold U+2028
        record_drops(result, head)
        result.stage = "screen"
        await screen_post_images(result, head, sources, defences, prepared, row.workdir)
        if result.done:  # the tamper screen scored it
            return
    # Defence in depth: whatever protected path changed on disk (however the patch spelled it)
    # goes back to the base, together with the declared test files.
    result.stage = "reset"
    sneaked = [p for p in agent_paths if path_matches(p, patterns)]
    if sneaked:
        if reset:  # the in-exec check let only named, unprotected paths through
            raise WorkspaceError(f"grader invariant broken: protected paths {sneaked[:5]} changed")
        result.protected_paths_touched = list(
            dict.fromkeys(result.protected_paths_touched + sneaked)
        )
    if not reset:  # the sneaked paths as a list file: the agent can make it long
        try:
            try:
                undo = await restore_list(sb, row.workdir, prepared.base, sneaked)
            except SandboxGone:
                raise
            except SandboxError as e:  # e.g. a disk the diff filled: the control run settles it
                raise WorkspaceError(f"writing the list of paths to restore failed: {e}") from e
            await run_checked(
                sb,
                undo + prepared.reset_script(row, []),
                "resetting test files and applying test_patch",
            )
        except WorkspaceError as e:
            if not kept.strip():  # no diff went in: the task's own reset fails
                raise
            await settle_reset(row, result, e, where, defences)
            return
    graded = Graded(
        sb, row, runner, prepared.base, agent_paths, result, timeout, prepared, defences, where
    )
    protocol = {"harbor": run_harbor, "eval_cmd": run_eval, "tests": run_tests}[row.grader]
    result.stage = "tests"
    await protocol(graded)
