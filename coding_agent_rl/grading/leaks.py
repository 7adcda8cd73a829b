"""Check, independently of the scrub, that an agent's workspace shows nothing after the base.

``find_future`` looks the way an agent would, in the repository and each checked-out submodule:
every commit object in the object store (reachable or not, alternates included) must be the base
or one of its ancestors; only one ref (the branch at the base); no reflog, stash, remote,
``FETCH_HEAD`` / ``ORIG_HEAD``, or packed ref beyond it. ``validate`` runs it after the same
workspace preparation ``run`` uses; a finding is a leak of the fix.
"""

from __future__ import annotations

from coding_agent_rl.grading.workspace import GIT, q, run_checked
from coding_agent_rl.sandbox.base import Sandbox

_CHECK = r"""car_git() { __GIT__ "$@"; }
car_leaks() {
  local dir=$1 gd base anc all f sha path
  cd "$dir"
  gd=$(car_git rev-parse --git-common-dir); gd=$(cd "$gd" && pwd -P)
  base=$(car_git rev-parse HEAD)
  anc=$(mktemp); all=$(mktemp)
  car_git rev-list "$base" | sort > "$anc"
  car_git cat-file --batch-all-objects --batch-check='%(objecttype) %(objectname)' \
    | awk '$1 == "commit" {print $2}' | sort > "$all"
  comm -23 "$all" "$anc" | sed "s|^|LEAK $dir: commit not in the base's history: |"
  rm -f "$anc" "$all"
  car_git for-each-ref --format='%(refname)' | grep -vx "$(car_git symbolic-ref -q HEAD || echo HEAD)" \
    | sed "s|^|LEAK $dir: extra ref: |" || true
  car_git remote | sed "s|^|LEAK $dir: remote: |" || true
  [ ! -s "$gd/logs/HEAD" ] || echo "LEAK $dir: reflog"
  for f in FETCH_HEAD ORIG_HEAD MERGE_HEAD; do
    [ ! -e "$gd/$f" ] || echo "LEAK $dir: $f"
  done
  while read -r sha path; do
    [ -n "$sha" ] && [ -e "$dir/$path/.git" ] || continue
    ( car_leaks "$dir/$path" )
  done <<< "$(car_git ls-tree -r "$base" | awk -F '\t' '$1 ~ /^160000 commit /{split($1, a, " "); print a[3] " " $2}')"
}
( car_leaks __WD__ )
echo CAR-LEAKS-DONE
"""


def leak_script(workdir: str) -> str:
    """The bash behind :func:`find_future`: prints ``LEAK ...`` lines, then a done marker."""
    return _CHECK.replace("__GIT__", GIT).replace("__WD__", q(workdir))


async def find_future(sb: Sandbox, workdir: str) -> list[str]:
    """What an agent could still see beyond the base commit (empty: nothing)."""
    r = await run_checked(sb, leak_script(workdir), "checking git for future commits")
    if "CAR-LEAKS-DONE" not in r.stdout:
        raise RuntimeError("the leak check did not finish")
    return [ln[len("LEAK ") :] for ln in r.stdout.splitlines() if ln.startswith("LEAK ")]
