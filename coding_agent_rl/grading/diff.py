"""Capture the agent's change as a binary-safe git patch against the base commit.

Runs as root in the agent sandbox but never through the agent's git configuration: a throwaway
repository borrows the agent's objects (``objects/info/alternates``) and builds its own index from
the base tree, so nothing the agent wrote into ``.git/config`` (hooks, fsmonitor, filter or diff
drivers) runs, the agent's index is left as it was, and commits the agent made are still
diffed against the base. Its ``.gitattributes`` do not count either (an ``info/attributes`` of
the throwaway repository overrides them): no binary, textconv, eol or filter tricks. New
(untracked, not ignored) files are included; the harness's own
files are excluded; a diff over the size cap comes back empty with ``truncated_reason`` set
("diff over the N MiB cap ..."): the rollout scores that as the model's failure, never as an
empty diff.
"""

from __future__ import annotations

import base64
import dataclasses

from coding_agent_rl.errors import CodingAgentRLError
from coding_agent_rl.grading.workspace import q
from coding_agent_rl.sandbox.base import Sandbox

DEFAULT_EXCLUDES = (".harness", "PROBLEM_STATEMENT.md")
DEFAULT_MAX_BYTES = 2 * 1024 * 1024


class DiffCaptureError(CodingAgentRLError, RuntimeError):
    """The diff could not be computed (e.g. the agent removed ``.git``); the message says why.
    The agent controls its workdir: this is the model's failure."""

    failure_kind = "model"
    default_stage = "diff"


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
# A bare-bones git dir (what `git init` would make, minus a process): HEAD, refs, objects.
mkdir -p "$tmp/g/refs" "$tmp/g/objects/info" "$tmp/g/info"
echo "ref: refs/heads/main" > "$tmp/g/HEAD"
echo "$objects" > "$tmp/g/objects/info/alternates"
# The repository's .gitattributes must not steer the capture (`*.py binary` would make every
# hunk a binary patch; eol/ident/encoding would rewrite what is added): info/attributes wins.
echo '* -text !eol -ident !filter !diff !merge !working-tree-encoding' > "$tmp/g/info/attributes"
export GIT_ATTR_NOSYSTEM=1
G="git -c safe.directory=* -c core.fsmonitor=false -c core.hooksPath=/dev/null -c core.quotePath=false -c core.attributesFile=/dev/null -c core.autocrlf=false -c diff.external= --git-dir=$tmp/g --work-tree=$wd"
base=$($G rev-parse --verify {base}) || {{ echo "base commit {base} not found in the agent's repository" >&2; exit 3; }}
$G read-tree "$base"
$G add -A -- . {excludes}
$G diff --cached --binary --no-ext-diff --no-textconv --no-color --no-renames "$base" -- . {excludes} > "$tmp/diff"
$G diff --cached --name-only -z --no-renames "$base" -- . {excludes} > "$tmp/names"
size=$(wc -c < "$tmp/diff")
# Base64 keeps the binary patch and the NUL-separated names intact on stdout.
echo "{mark} $size"
base64 < "$tmp/names"
echo "{mark}-DATA"
if [ "$size" -le {max_bytes} ]; then base64 < "$tmp/diff"; fi
"""
MARK = "CAR-DIFF"


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
    files and the problem statement by default. One exec: the patch comes back base64-encoded
    on stdout, so the sandbox's output cap must hold it (a diff that would not fit is captured
    as over the cap).
    """
    excludes = " ".join(q(f":(exclude){p}") for p in exclude)
    # base64 grows data by 4/3 plus a newline per 76 characters; leave room for the names.
    fits = (sb.output_cap - 64 * 1024) * 3 // 4 - sb.output_cap // 76
    limit = max(0, min(max_bytes, fits))
    script = _CAPTURE.format(
        wd=q(workdir),
        base=q(base_commit + "^{commit}"),
        excludes=excludes,
        mark=MARK,
        max_bytes=limit,
    )
    r = await sb.exec(script, timeout=timeout)
    if not r.ok:
        why = "timed out" if r.timed_out else f"exit {r.exit_code}"
        raise DiffCaptureError(f"git diff failed ({why}): {(r.stderr or r.stdout).strip()[-500:]}")
    try:  # the agent owns the sandbox and the tools this ran: its output is agent input
        size, raw_names, data_b64 = _parse_capture(r.stdout)
    except ValueError as e:  # binascii.Error is one
        raise DiffCaptureError(f"git diff output is malformed ({e})") from e
    files = tuple(n.decode("utf-8", "surrogateescape") for n in raw_names.split(b"\0") if n)
    if size > limit:
        shown = f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit}-byte"
        cap = f"{shown} cap" + ("" if limit == max_bytes else " (the sandbox's output cap)")
        reason = f"diff over the {cap}: {size} bytes in {len(files)} files"
        return CapturedDiff(text="", size=size, files=files, truncated_reason=reason)
    try:
        data = _b64(data_b64)
    except ValueError as e:
        raise DiffCaptureError(f"git diff output is malformed ({e})") from e
    return CapturedDiff(text=data.decode("utf-8", "surrogateescape"), size=size, files=files)


def _parse_capture(stdout: str) -> tuple[int, bytes, str]:
    """The capture script's output -> (diff size, NUL-separated names, base64 diff); raises
    ValueError when it is not what the script prints."""
    _, marked, rest = stdout.partition(f"{MARK} ")
    size_s, _, rest = rest.partition("\n")
    names_b64, data_mark, data_b64 = rest.partition(f"{MARK}-DATA\n")
    if not marked or not data_mark or not size_s.isdigit():
        raise ValueError("the capture's markers or size are missing")
    return int(size_s), _b64(names_b64), data_b64


def _b64(text: str) -> bytes:
    """``base64`` output (lines of 76) -> bytes; anything but the alphabet is a ValueError."""
    return base64.b64decode("".join(text.split()), validate=True)
