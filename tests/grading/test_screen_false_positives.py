"""The static screen's false positives on real fixes: the gold patches of the bundled tasks and
of the real-repository rows in ``../shared/realrepos`` (each changed file's real post-image, the
pre-image beside it) give no finding, under either rule set (the channel's, and the exit and
output rules of rows graded by their exit status or log)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

from coding_agent_rl.datasets import examples_dataset
from coding_agent_rl.grading.screen import screen, screened_files

EXAMPLES = examples_dataset().parent
REALREPOS = pathlib.Path(__file__).resolve().parents[2] / ".." / "shared" / "realrepos"


def _git(repo: pathlib.Path, *args: str, **kw) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, **kw
    ).stdout


def _fixed_trees(tmp: pathlib.Path) -> list[tuple[str, str, pathlib.Path, pathlib.Path]]:
    """(name, gold patch, tree before, tree after) per bundled task and real row."""
    out = []
    for gold in sorted(EXAMPLES.glob("*/gold.patch")):
        before, after = tmp / f"{gold.parent.name}-a", tmp / f"{gold.parent.name}-b"
        shutil.copytree(gold.parent / "repo", before)
        shutil.copytree(gold.parent / "repo", after)
        subprocess.run(
            ["git", "apply", "-"], input=gold.read_text(), text=True, cwd=after, check=True
        )
        out.append((gold.parent.name, gold.read_text(), before, after))
    rows = REALREPOS / "swebench.jsonl"
    if not rows.is_file():
        pytest.fail(f"{rows} is missing (CI provides ../shared)")
    for line in rows.read_text().splitlines():
        row = json.loads(line)
        owner, name = row["repo"].split("/")
        bundle = REALREPOS / "mirrors" / f"{owner}+{name}.bundle"
        before, after = tmp / f"{name}-a", tmp / f"{name}-b"
        for dest in (before, after):
            subprocess.run(["git", "clone", "-q", str(bundle), str(dest)], check=True)
        _git(before, "checkout", "-q", row["base_commit"])
        _git(after, "checkout", "-q", row["base_commit"])
        _git(after, "apply", "-", input=row["patch"])
        out.append((row["instance_id"], row["patch"], before, after))
    return out


@pytest.mark.parametrize("process", [True, False], ids=["exit-and-output-rules", "channel"])
def test_no_gold_patch_is_flagged(tmp_path, process):
    trees = _fixed_trees(tmp_path)
    assert len(trees) >= 7 + 6
    flagged, screened = {}, 0
    for name, patch, before, after in trees:
        added = screened_files(patch)
        sources = {p: (after / p).read_text() for p in added}
        pre = {p: (before / p).read_text() for p in added if (before / p).is_file()}
        screened += len(sources)
        found = screen(sources, added, pre, process=process)
        if found:
            flagged[name] = [str(f) for f in found]
    assert screened >= len(trees)
    assert flagged == {}, flagged
