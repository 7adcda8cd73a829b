"""Git and shell primitives every grading module shares: the hardened ``git`` command line,
strict-mode scripts whose failure names the command, and :class:`WorkspaceError`."""

from __future__ import annotations

import shlex

from coding_agent_rl.errors import GradingError
from coding_agent_rl.sandbox.base import ExecResult, Sandbox

# Never let repository config run code for us: no hooks, no fsmonitor, any owner accepted.
GIT = "git -c safe.directory='*' -c core.hooksPath=/dev/null -c core.fsmonitor=false"
q = shlex.quote

# Repository metadata through which a diff could make our root git run its code (filters,
# drivers, another git dir): saved before the diff is applied, put back right after.
_GIT_META = ("config", "config.worktree", "commondir", "info")


def save_git_meta(dest: str) -> str:
    """Script (in the workdir, as root, before the diff): copy ``.git``'s metadata to ``dest``."""
    d = q(dest)
    return f"rm -rf -- {d} && mkdir -p -- {d} && chmod 700 {d}\n" + "".join(
        f"if [ -e .git/{n} ]; then cp -a -- .git/{n} {d}/{n}; fi\n" for n in _GIT_META
    )


def restore_git_meta(src: str) -> str:
    """Script (in the workdir, as root, right after the diff): ``.git``'s metadata as saved,
    whatever the diff wrote there (through a symlink, say); before any other git command."""
    s = q(src)
    return (
        "if [ -d .git ] && [ ! -L .git ]; then\n"
        + "".join(
            f"  rm -rf -- .git/{n}; if [ -e {s}/{n} ]; then cp -a -- {s}/{n} .git/{n}; fi\n"
            for n in _GIT_META
        )
        + "fi\n"
    )


class WorkspaceError(GradingError):
    """The task could not be brought to its base state (an infrastructure / task-data failure)."""

    default_stage = "workspace"


async def run_checked(
    sb: Sandbox, script: str, what: str, *, timeout: float = 300, env: dict[str, str] | None = None
) -> ExecResult:
    """Run a root bash script; a non-zero exit raises :class:`WorkspaceError` naming ``what``,
    the command that failed and its stderr (stdout only when there is no stderr)."""
    r = await sb.exec(f"{STRICT}{script}", timeout=timeout, env=env)
    if not r.ok:
        tail = (r.stderr.strip() or r.stdout.strip())[-1200:]
        why = "timed out" if r.timed_out else f"exit {r.exit_code}"
        raise WorkspaceError(f"{what} failed ({why}): {tail}")
    return r


# Strict mode, and the command that killed the script on stderr (set -e alone exits silently).
STRICT = (
    "set -Eeuo pipefail\n"
    "trap 'car_rc=$?; echo \"command failed (exit $car_rc): $BASH_COMMAND\" >&2' ERR\n"
)
