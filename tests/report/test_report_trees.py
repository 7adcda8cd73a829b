"""The report's tree panel: where each branch left its root and its reward, from the records'
``tree`` field as ``run --branches`` writes it; a divergence's text stays text."""

from __future__ import annotations

import json
from pathlib import Path

from support.dom import parse
from support.report_fixture import PWN

from coding_agent_rl.report import render_report


def record(rid: int, reward: float, tree: dict) -> dict:
    return {"rollout_id": rid, "instance_id": "demo__t", "sample_index": rid, "reward": reward,
            "failure_kind": None if reward else "model", "turns": 4, "tree": tree}  # fmt: skip


def test_tree_panel_shows_branch_points_and_rewards(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    div = {"ours": PWN, "first_diff": 9}
    lines = [
        record(0, 1.0, {"tree_id": 0, "parent_rollout_id": None, "branch_turn": None,
                        "root_turns": 4, "branch_turns": [1, 3]}),
        record(5, 0.0, {"tree_id": 0, "parent_rollout_id": 0, "branch_turn": 3,
                        "replay": {"replayed": 3, "diverged": 1, "first_divergence": div}}),
        record(4, 1.0, {"tree_id": 0, "parent_rollout_id": 0, "branch_turn": 1,
                        "replay": {"replayed": 1, "diverged": 0, "first_divergence": None}}),
        record(1, 1.0, {"tree_id": 1, "parent_rollout_id": None, "branch_turn": None,
                        "root_turns": 2, "branch_turns": []}),  # no branch: not a tree here
    ]  # fmt: skip
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    html = render_report(run, tmp_path / "r.html", tokenizer=None).read_text()
    root, errors = parse(html)
    assert errors == []
    (tree,) = root.by_id("trees").find_all("tr", cls="tree")
    assert tree.attrs["data-tree"] == "0"
    forks = tree.find_all("span", cls="tree-fork")
    assert [f.attrs["style"] for f in forks] == ["left: 25.0%", "left: 75.0%"]
    assert ["solved" in f.classes for f in forks] == [True, False]
    rows = [b.text() for b in tree.find_all("div", cls="tree-branch")]
    assert rows[0].startswith("#4 · turn 1 · 1 · 1 / 0") and "diverged" not in rows[0]
    assert rows[1].startswith("#5 · turn 3 · 0 · 3 / 1") and "diverged" in rows[1]
    assert PWN not in html  # the divergence snippet is the agent's text: escaped


def test_no_tree_panel_without_trees(run_dir: Path, tmp_path: Path) -> None:
    html = render_report(run_dir, tmp_path / "r.html", tokenizer=None).read_text()
    assert 'id="trees"' not in html
