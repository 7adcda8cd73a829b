"""The root script run in the grading sandbox right after the agent's diff applied, and what
grading reads from its output (one exec: every exec is a round trip).

In order: unpack the bundle (prepared.py); list what changed; delete new files the tests must not
pick up (``pytest_plugin.offending_new_files``, run with the image's ``python3 -I``), printed
between :data:`DROP_MARK` lines; print the post-images of the screened Python files (read back
capped, then screened on the host: screen.py); and, when only paths the diff names changed,
reset the test files and apply the test patch in the same exec (:data:`RESET_MARK`).
"""

from __future__ import annotations

import logging
import shlex
from typing import TYPE_CHECKING

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.prepared import Prepared
from coding_agent_rl.grading.result import GradeResult, fail
from coding_agent_rl.grading.screen import Added, screen_off_loop
from coding_agent_rl.grading.workspace import GIT, emit_list, list_script
from coding_agent_rl.patches.files import patch_paths, path_matches
from coding_agent_rl.sandbox.capped_read import EMIT, emit_command, parse_emitted

if TYPE_CHECKING:  # the schema imports grading.patchfiles; avoid the cycle at runtime
    from coding_agent_rl.datasets.schema import TaskRow

log = logging.getLogger(__name__)
q = shlex.quote
SCREEN_BUDGET = 4 * 1024 * 1024  # post-image bytes read back for the static screen


def record_drops(result: GradeResult, head: str) -> None:
    """The new files the rule dropped go to ``protected_paths_touched`` (reasons to the log)."""
    _, _, rest = head.partition(f"{DROP_MARK}\n")
    for i, line in enumerate(rest.split(f"\n{DROP_END}", 1)[0].split("\n")):
        path, _, why = line.partition("\t")
        if path:
            result.protected_paths_touched.append(path)
            if i < 20:
                log.info("dropped the new file %r: %s", path[:300], why[:200])


async def screen_post_images(
    result: GradeResult, head: str, added: dict[str, Added], defences: Defences
) -> None:
    """Read the screened files' post-images from the apply exec's output and screen them (in a
    worker process: the parse is the agent's to make slow or large)."""
    per_file = _screen_cap(len(added))
    sources = {}
    for i, path in enumerate(added):
        got = parse_emitted(head, f"CAR-SRC:{i}", per_file, "head")
        if got.exists and not got.truncated:
            sources[path] = got.data.decode("utf-8", "surrogateescape")
        elif got.truncated:
            result.screen_skipped.append(path)
    found, total = await screen_off_loop(sources, added)
    findings = [str(f) for f in found]
    result.screen_findings = findings
    result.screen_findings_total = total
    if findings and defences.tamper_policy == "zero":
        result.tampering = list(findings)
        more = f" (+{total - 1} more)" if total > 1 else ""
        fail(result, "model", f"tamper screen: {findings[0]}{more}")


def _screen_cap(n: int) -> int:
    return max(64 * 1024, min(1024 * 1024, SCREEN_BUDGET // max(1, n)))


RESET_MARK = "CAR-RESET"
LIST_MARK = "CAR-LIST"
DROP_MARK, DROP_END = "CAR-DROPPED", "CAR-DROPPED-END"
_INLINE_NAMES_BYTES = 32 * 1024  # the named paths travel on the command line


def after_apply_script(
    prepared: Prepared,
    row: TaskRow,
    kept: str,
    patterns: list[str],
    screened: list[str],
    defences: Defences,
) -> str:
    """The root script run right after the diff applied: unpack the bundle; list what changed;
    drop new files the tests must not pick up (printed between :data:`DROP_MARK` lines); print the
    screened files' post-images; and, when only paths the diff names changed (none protected:
    the filter dropped those), reset the test files and apply the test patch in the same exec,
    printing :data:`RESET_MARK`. Anything else (or no ``comm -z`` in the image) leaves the
    reset to a separate exec."""
    d = prepared.runner.dir
    after, named, known, unexpected = (f"{d}/{n}.z" for n in ("after", "named", "known", "extra"))
    script = prepared.unpack_script() + list_script(prepared.base, save=after, emit=False)
    if defences.new_files:
        others, tests = f"{d}/others.z", " ".join(q(f) for f in row.test_files)
        script += (
            f"{GIT} ls-files -z --others > {q(others)} 2>/dev/null || :\n"
            f"LC_ALL=C sort -zu {q(others)} | LC_ALL=C comm -z -23 - {q(prepared.before_file)}"
            f" > {q(prepared.new_list)} 2>/dev/null || cp {q(others)} {q(prepared.new_list)}\n"
            f"chmod 644 {q(prepared.new_list)}\necho {DROP_MARK}\n"
            f"if command -v python3 >/dev/null 2>&1; then python3 -I {q(prepared.plugin_file)}"
            f" check-new {q(row.workdir)} {q(prepared.new_list)} {tests} || :; fi\n"
            f"echo; echo {DROP_END}\n"
        )
    if screened:
        per_file = _screen_cap(len(screened))
        script += EMIT + "".join(
            emit_command(f"CAR-SRC:{i}", path, per_file, "head") for i, path in enumerate(screened)
        )
    names = [n for n in patch_paths(kept) if "\0" not in n]  # no file has one: not an argument
    words = " ".join(q(n) for n in names)
    if len(words) <= _INLINE_NAMES_BYTES and not any(path_matches(n, patterns) for n in names):
        reset = prepared.reset_script(row, [])
        c = "LC_ALL=C"
        script += (
            f"printf '%s\\0' {words} > {q(named)}\n"
            f"if {c} sort -zu {q(prepared.before_file)} {q(named)} > {q(known)} 2>/dev/null &&"
            f" {c} sort -zu {q(after)} | {c} comm -z -23 - {q(known)} > {q(unexpected)} 2>/dev/null"
            f" && [ ! -s {q(unexpected)} ]; then\n"
            f"  echo {RESET_MARK}\n  ( set -e\n{reset}) || exit $?\nfi\n"
        )
    return script + emit_list(after)
