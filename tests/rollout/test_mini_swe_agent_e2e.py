"""``coding-agent-rl run --agent mini_swe_agent`` end to end: the real mini-swe-agent (its pinned
wheel set from the host cache, bind-mounted read-only, run by the image's python3.11 in isolated
mode) in Docker sandboxes that reach only the adapter, through litellm to the OpenAI Chat route.
The replay policy applies every bundled task's gold patch through its one ``bash`` tool and solves
it; the tiny random-weight ``hf:`` model (it never calls a tool: a give-up) scores 0, and
``verify-logprobs`` recomputes the tokens it sampled. The runs go concurrently; the local
(bubblewrap) backend runs one task the same way."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.rollout_helpers import TASKS, containers
from test_run_e2e import CLI, check_run, finish, start

from coding_agent_rl.cli import main
from coding_agent_rl.types import Sample

pytestmark = [pytest.mark.docker, pytest.mark.agents]

AGENT = ["--agent", "mini_swe_agent"]


@pytest.fixture(scope="module")
def mini_runs(rows, tiny_model_dir, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("mini-swe-agent")
    outs = {name: tmp / name for name in ("replay", "hf")}
    hf = ["--policy", f"hf:{tiny_model_dir}", "--max-new-tokens", "12", "--max-context", "8192"]
    procs = {
        "replay": start(outs["replay"], "--policy", "replay", *AGENT, "--concurrency", "3"),
        "hf": start(outs["hf"], *hf, *AGENT, "--limit", "1", "--max-turns", "6"),
    }
    try:
        printed = {name: finish(p, outs[name], 900) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    return {"out": outs, "printed": printed, "n": len(rows)}


def test_replay_solves_every_bundled_task_through_its_bash_tool(mini_runs):
    out = mini_runs["out"]["replay"]
    results, samples = check_run(out, mini_runs["printed"]["replay"], mini_runs["n"])
    assert all(r["reward"] == 1.0 and r["agent"] == "mini_swe_agent" for r in results), results
    for r in results:
        assert r["isolation"]["agent_network"] == "adapter-only", r  # it reached only the adapter
        log = (out / r["artifacts"]["agent_log"]).read_text()
        # The patch went through its bash tool (the observation it printed), and it ended on
        # its own: three replies without a tool call after the patch.
        assert "REPLAY_APPLIED" in log and "RepeatedFormatError" in log, log[-2000:]
        # Offline: no cost-map fetch, no error from litellm's cost tracking.
        assert "Error calculating cost" not in log and "Traceback" not in log, log[-2000:]
    final = [s for s in samples if s.metadata["segment"] == "final"]
    assert len(final) == mini_runs["n"] and all(isinstance(s, Sample) for s in final)


def test_tiny_model_gives_up_scores_zero_and_its_samples_are_token_exact(
    mini_runs, tiny_model_dir, capsys
):
    """Random weights never call ``bash``: mini-swe-agent answers each reply with a format
    error (a user message) and stops after the third; nothing changed, so it scores 0. Qwen3's
    template drops an earlier reply's thinking once a user message follows it, so each reply is
    its own sample (two ``wipe``, one ``final``). Every sampled token's logprob is recomputed by
    teacher forcing."""
    out = mini_runs["out"]["hf"]
    (record,), samples = check_run(out, mini_runs["printed"]["hf"], 1)
    assert record["agent"] == "mini_swe_agent" and record["turns"] == 3, record
    assert record["reward"] == 0.0 and record["failure_kind"] == "model", record
    assert record["fail_reason"] == "empty diff"
    assert [s.metadata["segment"] for s in samples] == ["wipe", "wipe", "final"]
    for sample in samples:
        sample.check()
        assert 1 <= sum(sample.loss_mask) == sample.response_length <= 12
    # Each later prompt holds the earlier reply and the format error after it.
    prompts = [len(s.tokens) - s.response_length for s in samples]
    assert prompts[0] + samples[0].response_length < prompts[1] < prompts[2], prompts
    trained = sum(sum(s.loss_mask) for s in samples)
    capsys.readouterr()
    code = main(
        ["verify-logprobs", str(out / "samples.jsonl"), "--model", str(tiny_model_dir), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] is True and report["max_abs"] < 1e-3, report
    assert report["trained"] == trained
    assert containers() == []


def test_replay_solves_on_the_local_backend(tmp_path):
    """On the local (bubblewrap) backend its folder is bound read-only the same way."""
    from coding_agent_rl.sandbox.local import bwrap_reason

    if reason := bwrap_reason():
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
    out = tmp_path / "local"
    out.mkdir()
    args = ["run", "--sandbox", "local", "--dataset", str(TASKS), "--policy", "replay", *AGENT]
    args += ["--limit", "1", "--agent-budget", "300", "--out", str(out)]
    with (tmp_path / "local.log").open("w") as log:
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=log, text=True)
    printed = finish(proc, out, 600)
    (solved,), _ = check_run(out, printed, 1)
    assert solved["reward"] == 1.0 and solved["agent"] == "mini_swe_agent", solved
