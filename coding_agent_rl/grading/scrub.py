"""Remove from a task's git repository everything the agent must not see.

Agents under RL learn to read the fix from the future: ``git log --all``, a tag, a remote
branch, the reflog, a stash, or a dangling object left by the image build. ``scrub_git`` leaves
one branch at the base commit and only the objects reachable from it (and from the index), then
verifies that: no commit outside the base's ancestry, no unreachable object.
"""

from __future__ import annotations

from coding_agent_rl.grading.workspace import GIT, WorkspaceError, q, run_checked
from coding_agent_rl.sandbox.base import Sandbox

# Few processes on the common path (a clean image repository): each git start costs ~50 ms on a
# busy machine, and this runs before every rollout. ``gc`` (a repack plus a handful of
# subprocesses) runs only when the check finds commits beyond the base or unreachable objects.
_SCRUB = r"""cd {wd}
owner=$(stat -c %u:%g .)
revs=$({git} rev-parse --git-common-dir {base} HEAD)
{{ read -r gd; read -r base; read -r head; }} <<< "$revs"
if [ "$head" != "$base" ]; then {git} checkout -q -f "$base"; fi
cur=$({git} symbolic-ref -q HEAD 2>/dev/null || true)
case "$cur" in refs/heads/?*) branch=${{cur#refs/heads/}} ;; *) branch=main ;; esac
# Objects borrowed from another repository (alternates) may hold future commits: copy what we
# need, then cut the link.
if [ -s "$gd/objects/info/alternates" ]; then {git} repack -a -d -q && rm -f "$gd/objects/info/alternates"; fi
for r in $({git} remote); do {git} remote remove "$r"; done
if [ "$head" != "$base" ] || [ "$cur" != "refs/heads/$branch" ]; then
  {git} update-ref "refs/heads/$branch" "$base"
  {git} symbolic-ref HEAD "refs/heads/$branch"
fi
# Every other ref goes (tags, remotes, stash, notes, replace refs), loose or packed, in one call.
dels=$({git} for-each-ref --format='delete %(refname)' | grep -vxF "delete refs/heads/$branch" || true)
if [ -n "$dels" ]; then printf '%s\n' "$dels" | {git} update-ref --stdin; fi
# After the ref updates (which log): no reflog, worktree, graft or operation state is left.
rm -rf "$gd/worktrees" "$gd/logs" "$gd/refs/original" "$gd/info/grafts" "$gd/shallow.lock"
rm -f "$gd"/FETCH_HEAD "$gd"/ORIG_HEAD "$gd"/MERGE_HEAD "$gd"/CHERRY_PICK_HEAD "$gd"/REVERT_HEAD \
      "$gd"/BISECT_* "$gd"/AUTO_MERGE
rm -rf "$gd"/rebase-merge "$gd"/rebase-apply "$gd"/sequencer
# .keep packs are never repacked and stale commit-graphs / midx list unreachable commits.
rm -f "$gd"/objects/pack/*.keep "$gd"/objects/pack/multi-pack-index
rm -rf "$gd"/objects/info/commit-graph "$gd"/objects/info/commit-graphs
check() {{
  # Every commit reachable from any ref is an ancestor of (or is) the base ...
  extra=$({git} rev-list --all --not "$base" | head -n 5)
  # ... and no unreachable object is left.
  dangling=$({git} fsck --unreachable --no-reflogs --connectivity-only 2>/dev/null | head -n 5)
}}
check
if [ -n "$extra$dangling" ]; then
  {git} -c gc.reflogExpire=now -c gc.pruneExpire=now -c gc.cruftPacks=false gc -q --prune=now
  rm -rf "$gd/logs"
  check
fi
if [ -n "$extra" ]; then echo "commits beyond base remain: $extra" >&2; exit 3; fi
if [ -n "$dangling" ]; then echo "unreachable objects remain: $dangling" >&2; exit 4; fi
chown -R "$owner" "$gd"
echo "$base"
"""


SCRUB_TIMEOUT_S = 900


def scrub_script(workdir: str, base_commit: str | None = None) -> str:
    """The bash script behind :func:`scrub_git` (run it with ``set -euo pipefail``); its last
    line of output is the base commit id."""
    return _SCRUB.format(wd=q(workdir), git=GIT, base=q((base_commit or "HEAD") + "^{commit}"))


async def scrub_git(sb: Sandbox, workdir: str, base_commit: str | None = None) -> str:
    """Leave only history up to ``base_commit`` (default HEAD); returns the base commit id.

    Deletes every ref but one branch at the base (tags, remotes, stash, notes, replace refs,
    packed refs), the reflog, and all objects not reachable from it (``git gc --prune=now``).
    Raises :class:`~coding_agent_rl.grading.workspace.WorkspaceError` when the check fails.
    """
    r = await run_checked(
        sb, scrub_script(workdir, base_commit), "scrubbing git", timeout=SCRUB_TIMEOUT_S
    )
    lines = r.stdout.strip().splitlines()
    if not lines:
        raise WorkspaceError("scrubbing git printed no base commit")
    return lines[-1]
