"""The root script run in the grading sandbox right after the agent's diff applied, and what
grading reads from its output (one exec: every exec is a round trip).

In order: unpack the bundle (prepared.py); list what changed; delete new files the tests must not
pick up (``pytest_plugin.offending_new_files``, run with the image's ``python3 -I``), printed
between :data:`DROP_MARK` lines; print the post-images of the screened Python files (read back
capped, then screened on the host: screen.py); and, when only paths the diff names changed,
reset the test files and apply the test patch in the same exec (:data:`RESET_MARK`).
"""

from __future__ import annotations

import base64
import logging
import re
import shlex

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.git import restore_git_meta
from coding_agent_rl.grading.prepared import Prepared
from coding_agent_rl.grading.result import GradeResult, fail
from coding_agent_rl.grading.screen import Added, screen_off_loop
from coding_agent_rl.grading.workspace import GIT, emit_list, list_script
from coding_agent_rl.patches.files import patch_paths, path_matches
from coding_agent_rl.sandbox.capped_read import EMIT, emit_command

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
    result: GradeResult,
    head: str,
    added: dict[str, Added],
    defences: Defences,
    prepared: Prepared | None = None,
    workdir: str = "",
) -> None:
    """Read the screened files' post-images (and the pre-images of changed files) from the
    apply exec's output and screen them (in a worker process: the parse is the agent's to make
    slow or large). Files over the shared read-back budget are read again one by one (up to
    :data:`REREAD_FILES` files, :data:`REREAD_BYTES` in all, :data:`REREAD_FILE` each: many
    files cannot shrink what is screened). Findings too: a screened path that is not a regular
    file (a symlink to a file the screen does not read), a new file over the per-file bound,
    files left over the re-read bounds. An existing file over the bound is recorded in
    ``screen_skipped``."""
    per_file = _screen_cap(len(added))
    emitted = _emitted(head)
    sources, pre = {}, {}
    odd, large = [], []
    for i, path in enumerate(added):
        size, data = emitted.get(f"CAR-SRC:{i}", (-1, b""))
        if 0 <= size <= per_file:
            sources[path] = data.decode("utf-8", "surrogateescape")
        elif size > per_file:
            large.append(path)
        elif size == -2:
            odd.append(f"{path[:300]}:0: is not a regular file (cannot be screened)")
        size, data = emitted.get(f"CAR-PRE:{i}", (-1, b""))
        if 0 <= size <= per_file:
            pre[path] = data.decode("utf-8", "surrogateescape")
    # Through the keyed channel an exit or a write around capture forges nothing (the channel
    # sees an early exit; the log is not read): those rules apply to the other result methods.
    process = result.result_method != "plugin"
    found, total = await screen_off_loop(sources, added, pre, process)
    findings = odd + [str(f) for f in found]
    total += len(odd)
    left: list[str] = []
    budget = REREAD_BYTES
    for k, path in enumerate(large):
        got = None
        if prepared is not None and k < REREAD_FILES and budget > 0:
            got = await _reread(prepared, workdir, path, not added[path].whole)
        if got is None:
            left.append(path)
            continue
        size, post, before = got
        budget -= size
        if size > REREAD_FILE:
            if added[path].whole:
                findings.append(f"{path[:300]}:0: a new file too large to screen ({size} bytes)")
                total += 1
            result.screen_skipped.append(path)
            continue
        more, n = await screen_off_loop(
            {path: post},
            {path: added[path]},
            {path: before} if before is not None else None,
            process,
        )
        findings += [str(f) for f in more]
        total += n
    if left:
        findings.append(f"{left[0][:300]}:0: {len(left)} changed files left unscreened")
        total += 1
    result.screen_findings = findings
    result.screen_findings_total = total
    if findings and defences.tamper_policy == "zero":
        result.tampering = list(findings)
        more_s = f" (+{total - 1} more)" if total > 1 else ""
        fail(result, "model", f"tamper screen: {findings[0]}{more_s}")


REREAD_FILES = 64
REREAD_BYTES = 32 * 1024 * 1024
REREAD_FILE = 2 * 1024 * 1024


async def _reread(
    prepared: Prepared, workdir: str, path: str, existed: bool
) -> tuple[int, str, str | None] | None:
    """One screened file's post-image (and pre-image) in an exec of its own: (size, post, pre),
    or None when it cannot be read back."""
    tmp = f"{prepared.runner.dir}/pre.py"
    script = EMIT + f"cd {q(workdir)}\n" + emit_command("CAR-SRC:0", path, REREAD_FILE, "head")
    if existed:
        script += (
            f"if {GIT} cat-file blob {q(prepared.base + ':' + path)} > {q(tmp)} 2>/dev/null; then "
            f"{emit_command('CAR-PRE:0', tmp, REREAD_FILE, 'head')}fi\n"
        )
    r = await prepared.sb.exec(script, timeout=120)
    emitted = _emitted(r.stdout)
    size, post = emitted.get("CAR-SRC:0", (-1, b""))
    if size < 0:
        return None
    pre_size, before = emitted.get("CAR-PRE:0", (-1, b""))
    decoded = before.decode("utf-8", "surrogateescape") if 0 <= pre_size <= REREAD_FILE else None
    return size, post.decode("utf-8", "surrogateescape"), decoded


def _emitted(head: str) -> dict[str, tuple[int, bytes]]:
    """Every ``car_emit CAR-SRC:i / CAR-PRE:i`` result in one pass: name -> (size, bytes)."""
    out: dict[str, tuple[int, bytes]] = {}
    lines = head.split("\n")
    for k, line in enumerate(lines):
        name, _, size = line.partition(" ")
        if not name.startswith(("CAR-SRC:", "CAR-PRE:")) or name in out:
            continue
        if not re.fullmatch(r"-?[0-9]{1,15}", size):
            continue
        try:
            data = base64.b64decode(lines[k + 1]) if k + 1 < len(lines) else b""
        except ValueError:
            continue
        out[name] = (int(size), data)
    return out


def _screen_cap(n: int) -> int:
    """Bytes read back per image of ``n`` screened files (a post- and maybe a pre-image each):
    the whole budget bounded, however many files."""
    return min(1024 * 1024, SCREEN_BUDGET // max(1, 2 * n))


RESET_MARK = "CAR-RESET"
LIST_MARK = "CAR-LIST"
DROP_MARK, DROP_END = "CAR-DROPPED", "CAR-DROPPED-END"
_INLINE_NAMES_BYTES = 32 * 1024  # the named paths travel on the command line


def after_apply_script(
    prepared: Prepared,
    row: TaskRow,
    kept: str,
    patterns: list[str],
    screened: dict[str, Added],
    defences: Defences,
) -> str:
    """The root script run right after the diff applied: unpack the bundle; list what changed;
    drop new files the tests must not pick up (printed between :data:`DROP_MARK` lines); print the
    screened files' post-images; and, when only paths the diff names changed (none protected:
    the filter dropped those), reset the test files and apply the test patch in the same exec,
    printing :data:`RESET_MARK`. Anything else (or no ``comm -z`` in the image) leaves the
    reset to a separate exec."""
    d = prepared.runner.dir
    added_whole = {path: a.whole for path, a in screened.items()}
    after, named, known, unexpected = (f"{d}/{n}.z" for n in ("after", "named", "known", "extra"))
    script = restore_git_meta(f"{d}/git-meta") + prepared.unpack_script()
    script += list_script(prepared.base, save=after, emit=False)
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
    if screened:  # post-images, and the pre-images of files that existed (screen.py)
        per_file = _screen_cap(len(screened))
        pre = f"{d}/pre.py"
        script += EMIT + "".join(
            emit_command(f"CAR-SRC:{i}", path, per_file, "head")
            + (
                f"if {GIT} cat-file blob {q(prepared.base + ':' + path)} > {q(pre)} 2>/dev/null;"
                f" then {emit_command(f'CAR-PRE:{i}', pre, per_file, 'head')}fi\n"
                if not added_whole.get(path, True)
                else ""
            )
            for i, path in enumerate(screened)
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
            # not `( ... ) || exit`: set -e is ignored in a subshell whose status is tested
            f"  echo {RESET_MARK}\n  ( set -e\n{reset})\n  car_rc=$?; [ $car_rc = 0 ] || exit $car_rc\nfi\n"
        )
    return script + emit_list(after)
