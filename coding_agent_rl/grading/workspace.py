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

import base64
import posixpath
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

from coding_agent_rl.datasets.prompt import PROBLEM_FILE
from coding_agent_rl.grading.git import GIT, WorkspaceError, q, run_checked
from coding_agent_rl.sandbox.base import Sandbox
from coding_agent_rl.settings import default

if TYPE_CHECKING:
    from coding_agent_rl.datasets.schema import TaskRow

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
        missing = q(
            f"base_commit {row.base_commit} of row {row.instance_id} is not in the repository "
            f"at {row.workdir} in image {row.image}: build the image from the repository at "
            "that commit (coding-agent-rl images build --dataset FILE --repo-source TEMPLATE)"
        )
        parts.append(
            f"if ! want=$({GIT} rev-parse -q --verify {want} 2>/dev/null); then "
            f"echo {missing} >&2; exit 3; fi\n"
            f'[ "$({GIT} rev-parse -q --verify HEAD || true)" = "$want" ] '
            f'|| {GIT} checkout -q -f "$want"'
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


async def prepare_workspace(
    sb: Sandbox,
    row: TaskRow,
    *,
    agent: bool,
    timeout: float = default("eval_timeout_s"),
    files: Mapping[str, str] | None = None,
) -> str:
    """Run pre_commands and snapshot the base; returns the base commit id.

    With ``agent=True`` also removes ``hidden_paths`` and scrubs git so that only history up to
    the base is left (no future commits, tags, remotes, reflog, stash, unreachable objects).
    ``files`` (absolute path -> text) are written afterwards, root-owned, outside the base
    (e.g. the problem statement), in the same exec when they are small.
    """
    files = dict(files or {})
    if not agent:
        r = await run_checked(
            sb, prepare_script(row), "preparing the workspace", timeout=timeout, env=SNAPSHOT_ENV
        )
        await _write_files(sb, files)
        return parse_base(r.stdout)
    from coding_agent_rl.grading.scrub import SCRUB_TIMEOUT_S, scrub_script

    # One exec (each is a round trip): the snapshot leaves HEAD at the base, which the scrub
    # keeps; its last line must name the same commit.
    script = prepare_script(row)
    if row.hidden_paths:  # absolute paths outside the workdir (schema.py)
        script += "rm -rf -- " + " ".join(q(p) for p in row.hidden_paths) + "\n"
    script += f"unset {' '.join(SNAPSHOT_ENV)}\n" + scrub_script(row.workdir)
    inline = sum(len(t.encode()) for t in files.values()) <= INLINE_FILES_BYTES
    if inline:  # silent: the scrub's output (the base) stays the last line
        script += "".join(
            f"mkdir -p {q(posixpath.dirname(path))}\n"
            f"printf %s {q(base64.b64encode(text.encode()).decode())} | base64 -d > {q(path)}\n"
            for path, text in files.items()
        )
    r = await run_checked(
        sb,
        script,
        "preparing the workspace (pre_commands, snapshot, hidden paths, git scrub)",
        timeout=timeout + SCRUB_TIMEOUT_S,
        env=SNAPSHOT_ENV,
    )
    base = parse_base(r.stdout)
    scrubbed = r.stdout.strip().splitlines()[-1]
    if scrubbed != base:
        raise WorkspaceError(f"scrubbing git left {scrubbed!r}, not the base {base}")
    if not inline:
        await _write_files(sb, files)
    return base


INLINE_FILES_BYTES = 48 * 1024  # Linux caps one command-line argument at 128 KiB


async def _write_files(sb: Sandbox, files: Mapping[str, str]) -> None:
    for path, text in files.items():
        await sb.write_file(path, text)


def restore_script(base: str, paths: list[str]) -> str:
    """Put each path back to its state at ``base``: tracked -> checked out, otherwise deleted.
    Runs in the workdir."""
    return "".join(
        f"if {GIT} cat-file -e {q(base + ':' + p)} 2>/dev/null; then rm -rf -- {q(p)}; "
        f"{GIT} checkout -q {q(base)} -- {q(p)}; else rm -rf -- {q(p)}; fi\n"
        for p in paths
    )


def restore_list_script(base: str, list_file: str) -> str:
    """:func:`restore_script` for the NUL-separated paths in ``list_file`` (any number of them:
    a list on the command line would stop at the kernel's argument-size limit). Runs in the
    workdir; paths are literal (no pathspec magic)."""
    g = f"{GIT} --literal-pathspecs"
    return (
        "while IFS= read -r -d '' car_p; do\n"
        f'  if {g} cat-file -e {q(base)}":$car_p" 2>/dev/null; then rm -rf -- "$car_p"; '
        f'{g} checkout -q {q(base)} -- "$car_p"; else rm -rf -- "$car_p"; fi\n'
        f"done < {q(list_file)}\n"
    )


def path_list(paths: list[str]) -> bytes:
    """``paths`` NUL-separated, as :func:`restore_list_script` reads them (the bytes git named)."""
    return b"".join(path_bytes(p) + b"\0" for p in paths if p and "\0" not in p)


def path_bytes(path: str) -> bytes:
    try:
        return path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return path.encode("utf-8", "surrogatepass")


INLINE_LIST_BYTES = 8 * 1024  # a longer path list goes through the file API


async def restore_list(sb: Sandbox, workdir: str, base: str, paths: list[str]) -> str:
    """A script fragment that puts ``paths`` back to ``base`` (run it from anywhere). The list
    travels as a file, never as arguments: written inside the fragment when it is short, else
    first through the file API."""
    data = path_list(paths)
    if not data:
        return ""
    list_file = f"/tmp/car-restore-{secrets.token_hex(6)}.z"
    if len(data) <= INLINE_LIST_BYTES:
        write = f"printf %s {q(base64.b64encode(data).decode())} | base64 -d > {q(list_file)}\n"
    else:
        await sb.write_file(list_file, data, mode=0o600)
        write = ""
    body = restore_list_script(base, list_file)
    return f"{write}( cd {q(workdir)}\n{body})\nrm -f {q(list_file)}\n"


async def restore_paths(sb: Sandbox, workdir: str, base: str, paths: list[str], what: str) -> None:
    """Put ``paths`` back to ``base`` (see :func:`restore_list`)."""
    script = await restore_list(sb, workdir, base, paths)
    if script:
        await run_checked(sb, script, what)


LIST_MARK = "CAR-LIST"


def list_script(base: str, save: str | None = None, *, emit: bool = True) -> str:
    """Print ``CAR-LIST`` then, NUL-separated, every path that differs from ``base`` in the
    worktree (untracked and ignored files included). Runs in the workdir. ``save``: keep the
    list in that file (for a later script to compare against); ``emit=False``: only that."""
    listing = (
        f"{{ {GIT} diff --name-only -z --no-renames {q(base)} -- ; {GIT} ls-files -z --others ; }}"
    )
    if save is None:
        return f"echo {LIST_MARK}; {listing}\n"
    return f"{listing} > {q(save)}\n" + (emit_list(save) if emit else "")


def emit_list(save: str) -> str:
    """Print a list saved by :func:`list_script` as it would have printed it."""
    return f"echo {LIST_MARK}; cat {q(save)}\n"


def parse_list(stdout: str) -> set[str]:
    _, _, tail = stdout.partition(LIST_MARK + "\n")
    return {p for p in tail.split("\0") if p.strip("\n")}


async def prepare_agent_workspace(sb: Sandbox, row: TaskRow) -> str:
    """The agent sandbox's workspace, as ``run`` prepares it before the agent starts (also
    used by ``validate``, which must catch what a rollout would trip on): pre_commands, the
    base snapshot, hidden paths removed, git history scrubbed to the base, the problem
    statement written next to the code. Returns the base commit id; raises
    :class:`WorkspaceError` when the task's set-up fails."""
    return await prepare_workspace(
        sb, row, agent=True, files={f"{row.workdir}/{PROBLEM_FILE}": row.problem_statement}
    )
