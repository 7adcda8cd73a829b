"""From SWE-bench rows to rewarded rollouts with the project's own commands, on an image built the
SWE-bench way: ``convert --from swebench`` -> ``images build --repo-source`` -> ``validate`` ->
``run`` with real Claude Code in Docker. The replay policy solves the task (reward 1); giving up
scores 0 as ``model``; a policy that searches for the fix in git history (``log --all``, reflog,
``fsck --lost-found``, ``cat-file`` on the future fix's hash, packed-refs, FETCH_HEAD, every
object) finds nothing: what it saw is written into its diff and checked here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.rollout_helpers import RUN_ID, containers, write_script
from support.upstream import FIX_MARK, make_upstream, search_future, swebench_record

pytestmark = [pytest.mark.docker, pytest.mark.agents]
CLI = [sys.executable, "-m", "coding_agent_rl.cli"]
# One image for the three rows (the same task): the name the datasets tests build too.
TEMPLATE = "coding-agent-rl/test-more-itertools_1776_more-itertools-101:latest"


def cli(*argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=timeout)


def variant(rec: dict, suffix: str) -> dict:
    """Another instance of the same task (same image), told apart by its problem statement."""
    return {
        **rec,
        "instance_id": f"{rec['instance_id']}-{suffix}",
        "problem_statement": f"{rec['problem_statement']}\n({suffix} run)\n",
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    assert containers() == []
    root = tmp_path_factory.mktemp("swebench-rows")
    up = make_upstream(root / "mirrors")
    rec = swebench_record(up)
    solve, rest = root / "solve.jsonl", root / "rest.jsonl"
    solve.write_text(json.dumps(rec) + "\n")
    rest.write_text("".join(json.dumps(variant(rec, s)) + "\n" for s in ("give-up", "search")))
    datasets = {}
    for src in (solve, rest):
        out = root / f"rows-{src.stem}.jsonl"
        r = cli("convert", "--from", "swebench", str(src), str(out), "--image-template", TEMPLATE)
        assert r.returncode == 0, r.stderr
        datasets[src.stem] = out
    source = f"{root}/mirrors/{{owner}}+{{name}}"
    r = cli("images", "build", "--dataset", str(datasets["rest"]), "--repo-source", source)
    assert r.returncode == 0 and "1/1 images ready" in r.stdout, r.stdout + r.stderr
    validated = cli("validate", "--dataset", str(datasets["solve"]), "--runs", "1")
    rows = [json.loads(line) for line in datasets["rest"].read_text().splitlines()]
    give_up, search = (row["metadata"]["problem_statement"] for row in rows)
    script = write_script(
        root / "policy.json",
        [
            {"match_prompt": r"\(give-up run\)", "steps": [{"say": "I cannot fix this."}]},
            {
                "match_prompt": r"\(search run\)",
                "steps": [
                    {"shell": "{\n" + search_future(up["fix"]) + "} > /testbed/SEARCH.txt 2>&1"},
                    {"say": "Searched the history."},
                ],
            },
        ],
    )
    assert give_up and search
    common = ["--sandbox-option", f"run_id={RUN_ID}", "--agent-budget", "300"]
    common += ["--eval-timeout", "120"]
    procs = {
        "replay": subprocess.Popen(
            [*CLI, "run", "--dataset", str(datasets["solve"]), "--policy", "replay",
             "--out", str(root / "replay"), *common],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ),
        "scripted": subprocess.Popen(
            [*CLI, "run", "--dataset", str(datasets["rest"]), "--policy", script,
             "--concurrency", "2", "--out", str(root / "scripted"), *common],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ),
    }  # fmt: skip
    finished = {}
    try:
        for name, p in procs.items():
            out, err = p.communicate(timeout=900)
            assert p.returncode == 0, err[-3000:]
            finished[name] = [
                json.loads(line)
                for line in (root / name / "results.jsonl").read_text().splitlines()
            ]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    return {"root": root, "up": up, "validate": validated, "results": finished}


def test_validate_accepts_the_built_row(runs):
    v = runs["validate"]
    assert v.returncode == 0, v.stdout + v.stderr
    assert "yes    built    none" in v.stdout


def test_replay_solves_the_converted_row(runs):
    (r,) = runs["results"]["replay"]
    assert r["reward"] == 1.0 and r["failure_kind"] is None, r
    assert r["f2p_passed"] == r["f2p_total"] == 1 and r["p2p_passed"] == r["p2p_total"] == 3


def test_giving_up_scores_zero_as_the_model(runs):
    r = next(r for r in runs["results"]["scripted"] if r["instance_id"].endswith("give-up"))
    assert r["reward"] == 0.0 and r["failure_kind"] == "model", r


def test_the_agent_cannot_reach_any_commit_after_the_base(runs):
    r = next(r for r in runs["results"]["scripted"] if r["instance_id"].endswith("search"))
    assert r["failure_kind"] == "model" and r["reward"] == 0.0, r  # graded, not infra
    diff = (runs["root"] / "scripted" / r["artifacts"]["diff"]).read_text()
    assert "+SEARCHED" in diff, diff[:2000]  # the search ran and its findings are in the diff
    assert "FOUND" not in diff and FIX_MARK not in diff and runs["up"]["fix"] not in diff


def test_no_container_left(runs):
    assert containers() == []
