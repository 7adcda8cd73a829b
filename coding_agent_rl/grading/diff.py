"""Capture the agent's change as a binary-safe git patch against the base commit.

Runs as root in the agent sandbox but never through the agent's git configuration: a throwaway
repository borrows the agent's objects (``objects/info/alternates``) and builds its own index from
the base tree, so nothing the agent wrote into ``.git/config`` (hooks, fsmonitor, filter or diff
drivers) runs, the agent's index is left as it was, and commits the agent made are still
diffed against the base. New (untracked, not ignored) files are included; the harness's own
files are excluded; a diff over the size cap comes back empty with ``truncated_reason`` set.
"""

from __future__ import annotations

import dataclasses

from coding_agent_rl.grading.workspace import q
from coding_agent_rl.sandbox.base import Sandbox

DEFAULT_EXCLUDES = (".harness", "PROBLEM_STATEMENT.md")
DEFAULT_MAX_BYTES = 2 * 1024 * 1024


class DiffCaptureError(RuntimeError):
    """The diff could not be computed (e.g. the agent removed ``.git``); the message says why."""


@dataclasses.dataclass(frozen=True)
class CapturedDiff:
    """``text`` decodes bytes with ``surrogateescape``: ``text.encode('utf-8', 'surrogateescape')``
    gives back the exact patch."""

    text: str
    size: int
    files: tuple[str, ...]
    truncated_reason: str | None = None

    @property
    def data(self) -> bytes:
        return self.text.encode("utf-8", "surrogateescape")


_CAPTURE = r"""set -euo pipefail
set -f  # no globbing: the agent names the files in this directory
wd={wd}
tmp=$(mktemp -d /tmp/car-diff.XXXXXXXX)
trap 'rm -rf "$tmp"' EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME="$tmp" XDG_CONFIG_HOME="$tmp"
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE
cd "$wd"
agit="git -c safe.directory=* -c core.fsmonitor=false -c core.hooksPath=/dev/null"
objects=$($agit rev-parse --path-format=absolute --git-common-dir)/objects
[ -d "$objects" ] || {{ echo "no git objects under $wd" >&2; exit 3; }}
git init -q "$tmp/g"
echo "$objects" > "$tmp/g/.git/objects/info/alternates"
G="git -c safe.directory=* -c core.fsmonitor=false -c core.hooksPath=/dev/null -c core.quotePath=false --git-dir=$tmp/g/.git --work-tree=$wd"
base=$($G rev-parse --verify {base}) || {{ echo "base commit {base} not found in the agent's repository" >&2; exit 3; }}
$G read-tree "$base"
$G add -A -- . {excludes}
out=$(mktemp -d /tmp/car-diff-out.XXXXXXXX)
$G diff --cached --binary --no-ext-diff --no-textconv --no-color --no-renames "$base" -- . {excludes} > "$out/diff"
$G diff --cached --name-only -z --no-renames "$base" -- . {excludes} > "$out/names"
echo "$(wc -c < "$out/diff") $out"
"""


async def capture_diff(
    sb: Sandbox,
    workdir: str,
    *,
    base_commit: str = "HEAD",
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = 300,
) -> CapturedDiff:
    """The agent's change in ``workdir`` relative to ``base_commit`` (the id prepare returned).

    ``exclude`` names paths (relative to the workdir) left out of the patch: the harness's own
    files and the problem statement by default.
    """
    excludes = " ".join(q(f":(exclude){p}") for p in exclude)
    script = _CAPTURE.format(wd=q(workdir), base=q(base_commit + "^{commit}"), excludes=excludes)
    r = await sb.exec(script, timeout=timeout)
    if not r.ok:
        why = "timed out" if r.timed_out else f"exit {r.exit_code}"
        raise DiffCaptureError(f"git diff failed ({why}): {(r.stderr or r.stdout).strip()[-500:]}")
    size_s, out = r.stdout.strip().splitlines()[-1].split(" ", 1)
    size = int(size_s)
    raw_names = await sb.read_file(f"{out}/names", binary=True)
    files = tuple(n.decode("utf-8", "surrogateescape") for n in raw_names.split(b"\0") if n)
    if size > max_bytes:
        reason = f"diff is {size} bytes, over the {max_bytes}-byte cap ({len(files)} files)"
        await sb.exec(f"rm -rf {q(out)}")
        return CapturedDiff(text="", size=size, files=files, truncated_reason=reason)
    data = await sb.read_file(f"{out}/diff", binary=True)
    await sb.exec(f"rm -rf {q(out)}")
    return CapturedDiff(text=data.decode("utf-8", "surrogateescape"), size=size, files=files)
