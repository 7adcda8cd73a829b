"""`coding-agent-rl bench adapter` at a small context: one JSON line, identical tokens, and the
incremental path already faster than re-rendering (the 65k figure is in benchmarks/README.md)."""

from __future__ import annotations

import json

from coding_agent_rl import cli


def test_bench_adapter_json_line(capsys):
    code = cli.main(["bench", "adapter", "--context", "30000", "--json", "--repeat", "1"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["tokens_identical"] is True
    assert result["context_tokens"] >= 30000
    assert result["turns"] >= 3
    assert result["tools"] == 20
    assert 15000 <= result["first_prompt_tokens"] <= 30000
    assert result["incremental_ms_per_turn"] > 0
    # the delta is a few hundred tokens against a 25-30k history
    assert result["speedup"] > 5
    assert result["baseline"]["kind"] == "run"
    assert result["targets_missed"] == [] and "speedup" not in result["targets"]


def test_bench_adapter_rejects_a_tiny_context(capsys):
    assert cli.main(["bench", "adapter", "--context", "100"]) == 2
    assert "--context" in capsys.readouterr().err
