"""Bring a task's sandbox to its base state; shared by the agent sandbox and the grading sandbox.

``prepare_workspace`` runs the row's ``pre_commands``, makes the workdir a git repository if the
image did not, and snapshots whatever ``pre_commands`` left behind as one commit with a fixed
author and date. Both sandboxes therefore start from the same tree *and* the same commit id, so
the agent's diff (taken against that commit) applies in the grading sandbox. In the agent sandbox
it also removes ``hidden_paths`` and scrubs git history (scrub.py).

The ``*_script`` functions return bash fragments so that callers can join several steps into
one ``exec`` (each exec costs a round trip to the sandbox).
"""

from __future__ import annotations

import secrets
import shlex
from typing import TYPE_CHECKING

from coding_agent_rl.sandbox.base import ExecResult, Sandbox

if TYPE_CHECKING:  # the schema imports grading.patchfiles; avoid the cycle at runtime
    from coding_agent_rl.datasets.schema import TaskRow

# Never let repository config run code for us: no hooks, no fsmonitor, any owner accepted.
GIT = "git -c safe.directory='*' -c core.hooksPath=/dev/null -c core.fsmonitor=false"
# Fixed identity and dates make the snapshot commit id identical in every sandbox.
SNAPSHOT_ENV = {
    "GIT_AUTHOR_NAME": "coding-agent-rl",
    "GIT_AUTHOR_EMAIL": "task@coding-agent-rl.invalid",
    "GIT_COMMITTER_NAME": "coding-agent-rl",
    "GIT_COMMITTER_EMAIL": "task@coding-agent-rl.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}
BASE_MARK = "CAR-BASE "
q = shlex.quote


class WorkspaceError(RuntimeError):
    """The task could not be brought to its base state (an infrastructure / task-data failure)."""


async def run_checked(
    sb: Sandbox, script: str, what: str, *, timeout: float = 300, env: dict[str, str] | None = None
) -> ExecResult:
    """Run a root bash script; a non-zero exit raises :class:`WorkspaceError` naming ``what``."""
    r = await sb.exec(f"set -euo pipefail\n{script}", timeout=timeout, env=env)
    if not r.ok:
        tail = (r.stderr.strip() or r.stdout.strip())[-800:]
        why = "timed out" if r.timed_out else f"exit {r.exit_code}"
        raise WorkspaceError(f"{what} failed ({why}): {tail}")
    return r


def _heredoc(text: str) -> str:
    tag = "CAR_EOF_" + secrets.token_hex(8)
    return f"<<'{tag}'\n{text.rstrip(chr(10))}\n{tag}\n"


def prepare_script(row: TaskRow) -> str:
    """pre_commands (output kept out of stdout), the base_commit check and the snapshot; prints
    ``CAR-BASE <commit>``. Run it with :data:`SNAPSHOT_ENV`."""
    wd = q(row.workdir)
    parts = [f"cd {wd}"]
    if row.pre_commands:
        doc = _heredoc("\n".join(row.pre_commands))
        parts.append(
            f"cat > /tmp/car-pre.sh {doc}"
            f"if ! bash -e /tmp/car-pre.sh > /tmp/car-pre.log 2>&1; then\n"
            f"  echo 'pre_commands failed:' >&2; tail -c 1500 /tmp/car-pre.log >&2; exit 1\nfi\n"
            f"rm -f /tmp/car-pre.sh /tmp/car-pre.log; cd {wd}"
        )
    if row.base_commit:
        want = q(row.base_commit + "^{commit}")
        parts.append(
            f"want=$({GIT} rev-parse --verify {want}); "
            f'[ "$({GIT} rev-parse HEAD)" = "$want" ] || {GIT} checkout -q -f "$want"'
        )
    parts.append(f"""if ! {GIT} rev-parse --git-dir >/dev/null 2>&1; then
  {GIT} init -q . && {GIT} add -A && {GIT} commit -q --allow-empty --no-verify -m "task base"
elif [ -n "$({GIT} status --porcelain --untracked-files=all)" ]; then
  {GIT} add -A && {GIT} commit -q --no-verify -m "task setup"
fi
echo "{BASE_MARK}$({GIT} rev-parse HEAD)\"""")
    return "\n".join(parts) + "\n"


def parse_base(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith(BASE_MARK):
            return line[len(BASE_MARK) :].strip()
    raise WorkspaceError("preparing the workspace printed no base commit")


async def prepare_workspace(sb: Sandbox, row: TaskRow, *, agent: bool, timeout: float = 600) -> str:
    """Run pre_commands and snapshot the base; returns the base commit id.

    With ``agent=True`` also removes ``hidden_paths`` and scrubs git so that only history up to
    the base is left (no future commits, tags, remotes, reflog, stash, unreachable objects).
    """
    r = await run_checked(
        sb, prepare_script(row), "preparing the workspace", timeout=timeout, env=SNAPSHOT_ENV
    )
    base = parse_base(r.stdout)
    if agent:
        from coding_agent_rl.grading.scrub import scrub_git

        if row.hidden_paths:
            await run_checked(
                sb, "rm -rf -- " + " ".join(q(p) for p in row.hidden_paths), "removing hidden paths"
            )
        await scrub_git(sb, row.workdir, base)
    return base


def restore_script(base: str, paths: list[str]) -> str:
    """Put each path back to its state at ``base``: tracked -> checked out, otherwise deleted.
    Runs in the workdir."""
    return "".join(
        f"if {GIT} cat-file -e {q(base + ':' + p)} 2>/dev/null; then rm -rf -- {q(p)}; "
        f"{GIT} checkout -q {q(base)} -- {q(p)}; else rm -rf -- {q(p)}; fi\n"
        for p in paths
    )


async def restore_paths(sb: Sandbox, workdir: str, base: str, paths: list[str], what: str) -> None:
    if paths:
        await run_checked(sb, f"cd {q(workdir)}\n{restore_script(base, paths)}", what)


LIST_MARK = "CAR-LIST"


def list_script(base: str) -> str:
    """Print ``CAR-LIST`` then, NUL-separated, every path that differs from ``base`` in the
    worktree (untracked and ignored files included). Runs in the workdir."""
    return (
        f"echo {LIST_MARK}; {{ {GIT} diff --name-only -z --no-renames {q(base)} -- ; "
        f"{GIT} ls-files -z --others ; }}\n"
    )


def parse_list(stdout: str) -> set[str]:
    _, _, tail = stdout.partition(LIST_MARK + "\n")
    return {p for p in tail.split("\0") if p.strip("\n")}
