"""The report's tree panel: each tree rollout's root, where its branches left it, their rewards.

Read from the records' ``tree`` field (rollout/branch.py); a tree without a branch in the run is
not shown. Positions are percentages of the root's turns, for the page's timeline.
"""

from __future__ import annotations

from typing import Any

from coding_agent_rl.report.load import Rollout


def _pct(k: Any, n: int) -> float:
    return round(100.0 * float(k) / n, 1) if n else 0.0


def tree_rows(rollouts: list[Rollout]) -> list[dict[str, Any]]:
    """One dict per tree with a branch: ``root`` (instance, id, reward, turns) and
    ``branches`` (id, turn, position, reward, replayed / diverged turns, first divergence)."""
    roots: dict[str, dict[str, Any]] = {}
    branches: dict[str, list[dict[str, Any]]] = {}
    for r in rollouts:
        tree = r.result.get("tree")
        if not isinstance(tree, dict) or tree.get("tree_id") is None:
            continue
        key = str(tree["tree_id"])
        if tree.get("parent_rollout_id") is None:
            roots[key] = {
                "instance_id": r.result.get("instance_id"),
                "rollout_id": r.result.get("rollout_id"),
                "reward": r.result.get("reward"),
                "turns": int(tree.get("root_turns") or r.result.get("turns") or 0),
            }
            continue
        got = tree.get("replay")
        replay: dict[str, Any] = got if isinstance(got, dict) else {}
        first = replay.get("first_divergence") or {}
        branches.setdefault(key, []).append(
            {
                "rollout_id": r.result.get("rollout_id"),
                "turn": tree.get("branch_turn"),
                "reward": r.result.get("reward"),
                "replayed": replay.get("replayed"),
                "diverged": replay.get("diverged"),
                "divergence": str(first.get("ours", ""))[:200] if first else "",
            }
        )
    out = []
    for key, root in roots.items():
        mine = sorted(branches.get(key, []), key=lambda b: (b["turn"] or 0, str(b["rollout_id"])))
        if not mine:
            continue
        for b in mine:
            b["pos"] = _pct(b["turn"] or 0, root["turns"])
        out.append({"tree_id": key, "root": root, "branches": mine})
    return out
