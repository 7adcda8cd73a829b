"""Remove from a task's git repository everything the agent must not see.

``scrub_git`` leaves one branch at the base commit and only the objects reachable from it (in
submodules too), then verifies it; it copes with repositories as real image sets ship them.
Details: docs/modules/grading.md.
"""

from __future__ import annotations

from coding_agent_rl.grading.git import GIT, WorkspaceError, q, run_checked
from coding_agent_rl.sandbox.base import Sandbox

# A bash function (run under ``set -euo pipefail``); ``car_scrub DIR COMMIT`` scrubs one
# repository and recurses into its checked-out submodules. Few processes on the common path (a
# clean image repository): ``gc`` runs only when the check finds something to remove.
_FUNCS = r"""car_git() { __GIT__ "$@"; }
car_fail() { echo "git scrub: $*" >&2; exit 3; }
car_check() {  # sets extra / dangling; a failing fsck is reported with its stderr
  extra=$(car_git rev-list --max-count=5 --all --not "$base" --)
  if ! car_git fsck --unreachable --no-reflogs --connectivity-only >"$gd/car-fsck" 2>"$gd/car-fsck.err"; then
    fsck_err=$(tail -c 600 "$gd/car-fsck.err"); dangling=fsck
  else
    fsck_err=""; dangling=$(head -n 5 "$gd/car-fsck")
  fi
  rm -f "$gd/car-fsck" "$gd/car-fsck.err"
}
car_scrub() {
  local dir=$1 spec=$2 gd base head cur branch s sha path sub g v keep owner
  local -a visited=()
  cd "$dir"
  owner=$(stat -c %u:%g .)
  gd=$(car_git rev-parse --git-common-dir)
  gd=$(cd "$gd" && pwd -P)
  [ ! -d "$gd/reftable" ] || car_fail "$dir: the reftable ref store is not supported"
  base=$(car_git rev-parse -q --verify "$spec^{commit}") \
    || car_fail "$dir: $spec is not a commit of this repository"
  head=$(car_git rev-parse -q --verify 'HEAD^{commit}' || true)
  if [ "$head" != "$base" ]; then car_git checkout -q -f "$base"; fi
  cur=$(car_git symbolic-ref -q HEAD || true)
  case "$cur" in refs/heads/?*) branch=${cur#refs/heads/} ;; *) branch=main ;; esac
  # Objects borrowed from another repository (alternates) may hold future commits: copy what
  # we need, then cut the link.
  if [ -s "$gd/objects/info/alternates" ]; then
    car_git repack -a -d -q && rm -f "$gd/objects/info/alternates"
  fi
  # Remotes and the branches' tracking settings.
  for s in $(car_git config --name-only --get-regexp '^(remote|branch)\.' 2>/dev/null \
             | sed 's/\.[^.]*$//' | sort -u || true); do
    car_git config --remove-section "$s" 2>/dev/null || true
  done
  # The ref store is rebuilt with one branch: tags, remotes (broken symbolic refs included),
  # stash, notes, replace refs, loose or packed, all go.
  rm -rf "$gd/refs" "$gd/packed-refs"
  mkdir -p "$gd/refs/heads" "$gd/refs/tags"
  car_git update-ref "refs/heads/$branch" "$base"
  car_git symbolic-ref HEAD "refs/heads/$branch"
  # A fresh index: its extensions (resolve-undo, split index) can name future blobs.
  rm -f "$gd/index" "$gd"/sharedindex.*
  car_git read-tree "$base"
  car_git update-index -q --refresh >/dev/null 2>&1 || true
  # After the ref updates (which log): no reflog, worktree, graft, operation state, rerere or
  # LFS cache, server info or commit message is left.
  rm -rf "$gd/worktrees" "$gd/logs" "$gd/refs/original" "$gd/info/grafts" "$gd/shallow.lock" \
         "$gd/rebase-merge" "$gd/rebase-apply" "$gd/sequencer" "$gd/rr-cache" "$gd/lfs" "$gd/svn"
  rm -f "$gd"/{FETCH_HEAD,ORIG_HEAD,MERGE_HEAD,MERGE_MSG,MERGE_MODE,SQUASH_MSG,AUTO_MERGE} \
        "$gd"/{CHERRY_PICK_HEAD,REVERT_HEAD,COMMIT_EDITMSG,TAG_EDITMSG,gitk.cache} \
        "$gd"/BISECT_* "$gd/info/refs" "$gd/objects/info/packs"
  # .keep packs are never repacked and stale commit-graphs / midx list unreachable commits.
  rm -f "$gd"/objects/pack/*.keep "$gd/objects/pack/multi-pack-index"
  rm -rf "$gd/objects/info/commit-graph" "$gd/objects/info/commit-graphs"
  # Checked-out submodules: each at the commit the base records, scrubbed the same way.
  while read -r sha path; do
    [ -n "$sha" ] && [ -e "$dir/$path/.git" ] || continue
    ( car_scrub "$dir/$path" "$sha" )
    sub=$(cd "$dir/$path" && car_git rev-parse --git-common-dir)
    visited+=("$(cd "$dir/$path" && cd "$sub" && pwd -P)")
  done <<< "$(car_git ls-tree -r "$base" | awk -F '\t' '$1 ~ /^160000 commit /{split($1, a, " "); print a[3] " " $2}')"
  cd "$dir"
  # A submodule repository that is not checked out keeps its whole history: removed.
  if [ -d "$gd/modules" ]; then
    while IFS= read -r -d '' g; do
      g=${g%/HEAD}; keep=0
      for v in "${visited[@]}"; do case "$g/" in "$v"/*) keep=1 ;; esac; done
      [ "$keep" = 1 ] || rm -rf "$g"
    done < <(find "$gd/modules" -name HEAD -type f -print0)
  fi
  car_check
  if [ -n "$extra$dangling" ]; then
    car_git -c gc.reflogExpire=now -c gc.reflogExpireUnreachable=now -c gc.pruneExpire=now \
      -c gc.cruftPacks=false -c gc.writeCommitGraph=false -c core.commitGraph=false \
      gc -q --prune=now
    rm -rf "$gd/logs"
    car_check
  fi
  [ -z "$fsck_err" ] || car_fail "$dir: git fsck failed: $fsck_err"
  [ -z "$extra" ] || car_fail "$dir: commits beyond the base remain: $extra"
  [ -z "$dangling" ] || car_fail "$dir: unreachable objects remain: $dangling"
  chown -R "$owner" "$gd"
}
"""

SCRUB_TIMEOUT_S = 900


def scrub_script(workdir: str, base_commit: str | None = None) -> str:
    """The bash script behind :func:`scrub_git` (run it with ``set -euo pipefail``); its last
    line of output is the base commit id."""
    base = q(base_commit or "HEAD")
    return (
        _FUNCS.replace("__GIT__", GIT)
        + f"( car_scrub {q(workdir)} {base} )\n"
        + f"cd {q(workdir)} && {GIT} rev-parse HEAD\n"
    )


async def scrub_git(sb: Sandbox, workdir: str, base_commit: str | None = None) -> str:
    """Leave only history up to ``base_commit`` (default HEAD); returns the base commit id.

    Deletes every ref but one branch at the base (tags, remotes, stash, notes, replace refs,
    packed refs, broken symbolic refs), the reflog, operation state, and all objects not
    reachable from it (``git gc --prune=now``), in the repository and its checked-out
    submodules. Raises :class:`~coding_agent_rl.grading.workspace.WorkspaceError` (with git's
    stderr) when a step or the final check fails.
    """
    r = await run_checked(
        sb, scrub_script(workdir, base_commit), "scrubbing git", timeout=SCRUB_TIMEOUT_S
    )
    lines = r.stdout.strip().splitlines()
    if not lines:
        raise WorkspaceError("scrubbing git printed no base commit")
    return lines[-1]
