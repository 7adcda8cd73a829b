"""A real model through the native loop: a tiny random-weight Qwen3ForCausalLM (``hf:`` policy,
real sampling with logprobs on CPU) runs a few turns on a bundled task in Docker with
``coding-agent-rl run --agent native``, and ``verify-logprobs`` recomputes every sampled token's
logprob by teacher forcing over the whole sample (observations included as context) and agrees."""

from __future__ import annotations

import json

import pytest
from support.rollout_helpers import RUN_ID, TASKS, containers

from coding_agent_rl.cli import main
from coding_agent_rl.types import Sample, Status

pytestmark = [pytest.mark.docker]


def test_tiny_model_turns_and_verify_logprobs(rows, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "run", "--dataset", str(TASKS), "--agent", "native", "--policy", f"hf:{tiny_model_dir}",
            "--limit", "1", "--max-turns", "3", "--max-new-tokens", "12", "--max-context", "4096",
            "--temperature", "1.0", "--native-option", "on_no_tool_call=nudge",
            "--sandbox-option", f"run_id={RUN_ID}", "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    capsys.readouterr()
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    (line,) = (out / "samples.jsonl").read_text().splitlines()
    sample = Sample.from_dict(json.loads(line))
    sample.check()
    # Random weights never call a tool: every reply is nudged, three turns, then graded (0).
    assert record["turns"] == 3 and record["failure_kind"] == "model" and record["reward"] == 0.0
    turns = sample.metadata["turns"]
    assert [t["observation_tokens"] > 0 for t in turns] == [True, True, False]
    assert sample.status == Status.COMPLETED and sample.metadata["end_reason"] == "max_turns"
    trained = sum(sample.loss_mask)
    assert trained == sum(t["sampled"] for t in turns) and 3 <= trained <= 36
    masked = sample.response_length - trained
    assert masked == sum(t["observation_tokens"] for t in turns) > 0
    assert code == 0 and containers() == []

    code = main(
        ["verify-logprobs", str(out / "samples.jsonl"), "--model", str(tiny_model_dir), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] is True, report
    assert report["trained"] == trained and report["max_abs"] < 1e-3
