"""Token exactness through the agent CLIs: a tiny random-weight Qwen3ForCausalLM (``hf:`` policy,
real sampling with logprobs on CPU) answers Gemini CLI (Gemini wire format) and pi (OpenAI Chat)
in Docker with ``coding-agent-rl run``, and ``verify-logprobs`` recomputes every sampled token's
logprob by teacher forcing over the stored sample and agrees: what the CLI sent back was
rendered to exactly the tokens the policy sampled. The two runs go concurrently."""

from __future__ import annotations

import json

import pytest
from support.rollout_helpers import containers
from test_run_e2e import finish, start

from coding_agent_rl.cli import main
from coding_agent_rl.types import Sample

pytestmark = [pytest.mark.docker, pytest.mark.agents]

AGENTS = ("gemini_cli", "pi")


@pytest.fixture(scope="module")
def hf_runs(tiny_model_dir, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("agents-hf")
    args = ["--policy", f"hf:{tiny_model_dir}", "--limit", "1", "--max-new-tokens", "12"]
    args += ["--max-context", "32768", "--temperature", "1.0"]
    procs = {name: start(tmp / name, "--agent", name, *args) for name in AGENTS}
    try:
        printed = {name: finish(p, tmp / name, 600) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    return {"out": {name: tmp / name for name in AGENTS}, "printed": printed}


@pytest.mark.parametrize("agent", AGENTS)
def test_cli_samples_are_token_exact(agent, hf_runs, tiny_model_dir, capsys):
    out = hf_runs["out"][agent]
    assert hf_runs["printed"][agent]["total"] == 1
    (record,) = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert record["agent"] == agent and record["turns"] >= 1, record
    # Random weights write no patch: the model's failure, scored 0, never infrastructure.
    assert record["failure_kind"] == "model" and record["reward"] == 0.0, record
    samples = [
        Sample.from_dict(json.loads(x)) for x in (out / "samples.jsonl").read_text().splitlines()
    ]
    assert samples
    for s in samples:
        s.check()
    trained = sum(sum(s.loss_mask) for s in samples)
    assert trained >= record["turns"]  # at least one sampled token per turn

    capsys.readouterr()
    path = out / "samples.jsonl"
    code = main(["verify-logprobs", str(path), "--model", str(tiny_model_dir), "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and report["ok"] is True, report
    assert report["trained"] == trained and report["max_abs"] < 1e-3
    # The check can fail: one sampled token's logprob moved by 0.5 is caught.
    bad = json.loads(path.read_text().splitlines()[0])
    at = bad["loss_mask"].index(1)
    bad["rollout_log_probs"][at] += 0.5
    (out / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    assert main(["verify-logprobs", str(out / "bad.jsonl"), "--model", str(tiny_model_dir)]) == 1
    assert containers() == []
