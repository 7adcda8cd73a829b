"""``coding-agent-rl run`` end to end, as a user runs it: the real command in a subprocess, real
Claude Code and Codex binaries in Docker sandboxes, the CPU policy servers, grading in a clean
sandbox. Three runs go concurrently (once per module): the replay policy with Claude Code on all
six example tasks and with Codex on two; a scripted policy that gives up on one task and rewrites
the tests of another, two samples per task (GRPO groups)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import pytest
from support.rollout_helpers import (
    GIVE_UP,
    REWRITE_TESTS,
    RUN_ID,
    TASKS,
    containers,
    reap,
    task_rule,
    write_script,
)

from coding_agent_rl.types import Sample, Status

pytestmark = [pytest.mark.docker, pytest.mark.agents]

CLI = [sys.executable, "-m", "coding_agent_rl.cli"]
COMMON = ["--dataset", str(TASKS), "--sandbox-option", f"run_id={RUN_ID}"]
COMMON += ["--agent-budget", "300", "--eval-timeout", "120"]


def start(out: pathlib.Path, *args: str) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    with (out.parent / f"{out.name}.log").open("w") as log:  # the child keeps its copy
        return subprocess.Popen(
            [*CLI, "run", *COMMON, "--out", str(out), *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def finish(proc: subprocess.Popen, out: pathlib.Path, timeout: float) -> dict[str, Any]:
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    finally:
        reap(proc)
    log = (out.parent / f"{out.name}.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def runs(rows, tmp_path_factory) -> dict[str, Any]:
    assert containers() == []
    tmp = tmp_path_factory.mktemp("run")
    spec = write_script(
        tmp / "hacks.json",
        [task_rule(rows["slugify"], GIVE_UP), task_rule(rows["pager"], REWRITE_TESTS)],
    )
    names = ("claude", "codex", "scripted", "opencode", "codex_all")
    outs = {name: tmp / name for name in names}
    t0 = time.monotonic()
    procs = {
        "claude": start(outs["claude"], "--policy", "replay", "--concurrency", "3"),
        "codex": start(outs["codex"], "--policy", "replay", "--agent", "codex", "--limit", "2"),
        "scripted": start(
            outs["scripted"], "--policy", spec, "--limit", "2", "--n-samples", "2",
            "--concurrency", "4",
        ),
        # The 7th and 6th CLI on every task: their diffs go through the screen, whose finding
        # would zero the reward (tamper_policy "zero", the default).
        "opencode": start(outs["opencode"], "--policy", "replay", "--agent", "opencode",
                          "--concurrency", "2"),
        "codex_all": start(outs["codex_all"], "--policy", "replay", "--agent", "codex",
                           "--concurrency", "2"),
    }  # fmt: skip
    try:
        printed = {name: finish(p, outs[name], 900) for name, p in procs.items()}
    finally:
        for p in procs.values():
            reap(p)
    wall = time.monotonic() - t0
    return {"out": outs, "printed": printed, "wall": wall, "leftovers": containers()}


def check_run(out: pathlib.Path, printed: dict[str, Any], n: int) -> tuple[list, list]:
    """The output folder is well-formed; returns (results, samples)."""
    results = read_jsonl(out / "results.jsonl")
    samples = [Sample.from_dict(d) for d in read_jsonl(out / "samples.jsonl")]
    summary = json.loads((out / "summary.json").read_text())
    assert len(results) == n == summary["total"] == printed["total"]
    assert summary["solved"] == printed["solved"] == sum(r["reward"] == 1.0 for r in results)
    assert summary["samples"] == len(samples)
    assert set(summary["timings_p50"]) >= {"sandbox_s", "agent_s", "grade_s", "total_s"}
    for r in results:
        assert r["failure_kind"] != "infra", r
        assert r["abort_reason"] is None
        assert set(r["timings"]) == {
            "sandbox_s", "install_s", "agent_s", "diff_s", "grade_s", "total_s",
        }  # fmt: skip
        assert r["turns"] >= 1 and r["num_segments"] >= 1
        assert r["agent_exit_code"] == 0
        mine = [s for s in samples if s.metadata["instance_id"] == r["instance_id"]
                and s.index == r["sample_index"]]  # fmt: skip
        assert len(mine) == r["num_segments"]
        assert {s.rollout_id for s in mine} == {r["rollout_id"]}
        for s in mine:
            s.check()
            assert s.status in (Status.COMPLETED, Status.TRUNCATED)
            assert s.metadata["segment"] in ("final", "wipe", "subagent")
            assert sum(s.loss_mask) > 0 and not s.remove_sample
            assert s.reward == r["reward"]
            assert s.tokens[-s.response_length :] and len(s.tokens) > s.response_length
        art = out / "rollouts" / f"{r['instance_id']}__{r['sample_index']}"
        assert (art / "diff.patch").is_file() and (art / "test_log.txt").is_file()
        assert (out / r["artifacts"]["agent_log"]).stat().st_size > 0
    return results, samples


def test_no_container_left(runs):
    assert runs["leftovers"] == []


def test_claude_code_replay_solves_every_example_task(runs, rows):
    results, samples = check_run(runs["out"]["claude"], runs["printed"]["claude"], 6)
    assert {r["instance_id"] for r in results} == {r.instance_id for r in rows.values()}
    assert all(r["reward"] == 1.0 and r["failure_kind"] is None for r in results)
    assert all(r["f2p_passed"] == r["f2p_total"] > 0 for r in results)
    for r in results:
        diff = (runs["out"]["claude"] / r["artifacts"]["diff"]).read_text()
        assert diff.startswith("diff --git"), diff[:200]
        assert "PROBLEM_STATEMENT" not in diff
        # The agent's log is Claude Code's stream-json.
        log = (runs["out"]["claude"] / r["artifacts"]["agent_log"]).read_text()
        assert any(json.loads(line).get("type") == "result" for line in log.splitlines()
                   if line.startswith("{"))  # fmt: skip
    assert len({s.rollout_id for s in samples}) == 6


def test_codex_replay_solves_two_tasks(runs):
    results, _ = check_run(runs["out"]["codex"], runs["printed"]["codex"], 2)
    assert all(r["reward"] == 1.0 and r["agent"] == "codex" for r in results)


@pytest.mark.parametrize("name,agent", [("opencode", "opencode"), ("codex_all", "codex")])
def test_gold_replay_diffs_of_each_cli_have_no_screen_finding(runs, rows, name, agent):
    """The gold patch as the CLI's own tools write it, and what the CLI leaves beside it, is
    graded 1.0 on every task, with no tampering finding (any finding would zero it)."""
    results, _ = check_run(runs["out"][name], runs["printed"][name], 6)
    assert {r["instance_id"] for r in results} == {r.instance_id for r in rows.values()}
    for r in results:
        assert r["agent"] == agent and r["reward"] == 1.0, r
        assert r["tampering"] == [] and r["tampering_total"] == 0, r
        assert r["f2p_passed"] == r["f2p_total"] > 0, r


def test_giving_up_and_rewriting_tests_both_score_zero(runs):
    results, _ = check_run(runs["out"]["scripted"], runs["printed"]["scripted"], 4)
    by_task: dict[str, list] = {}
    for r in results:
        by_task.setdefault(r["instance_id"], []).append(r)
        assert r["reward"] == 0.0 and r["failure_kind"] == "model", r
    gave_up, hacked = by_task["example__slugify"], by_task["example__pager"]
    assert all(r["fail_reason"] == "empty diff" for r in gave_up)
    for r in hacked:
        diff = (runs["out"]["scripted"] / r["artifacts"]["diff"]).read_text()
        assert "conftest.py" in diff and "tests/test_" in diff  # the hack was really made
        assert "conftest.py" in r["protected_paths_touched"]
        assert "protected" in r["fail_reason"]
        # Claude Code echoes the command without its leading `cd /testbed &&`; the adapter
        # still sees an ordinary continuation, so no extra sample is split off.
        assert r["num_segments"] == 1, r


def test_n_samples_make_one_grpo_group_per_task(runs):
    results, samples = check_run(runs["out"]["scripted"], runs["printed"]["scripted"], 4)
    groups: dict[int, set] = {}
    for r in results:
        groups.setdefault(r["group_index"], set()).add((r["instance_id"], r["sample_index"]))
    assert len(groups) == 2
    for members in groups.values():
        assert len(members) == 2 and len({iid for iid, _ in members}) == 1
    assert len({r["sample_index"] for r in results}) == 4
    assert len({r["rollout_id"] for r in results}) == 4
    for s in samples:
        assert s.group_index == next(
            r["group_index"] for r in results if r["sample_index"] == s.index
        )


def test_resume_skips_finished_rollouts(runs):
    out = runs["out"]["codex"]
    before = (out / "results.jsonl").read_text(), (out / "samples.jsonl").read_text()
    proc = start(out, "--policy", "replay", "--agent", "codex", "--limit", "2", "--resume")
    printed = finish(proc, out, 120)
    assert printed["total"] == 2 and printed["solved"] == 2
    assert ((out / "results.jsonl").read_text(), (out / "samples.jsonl").read_text()) == before
    # One more task on resume runs exactly that one.
    proc = start(out, "--policy", "replay", "--agent", "codex", "--limit", "3", "--resume")
    printed = finish(proc, out, 600)
    results = read_jsonl(out / "results.jsonl")
    assert printed["total"] == 3 and len(results) == 3
    assert results[:2] == [json.loads(line) for line in before[0].splitlines()]
    assert containers() == []
