"""`coding-agent-rl bench adapter` at a small context: one JSON line, identical tokens, and the
incremental path already faster than re-rendering (the 65k figure is in benchmarks/README.md);
an incremental path slowed on purpose misses the speedup target and exits 1."""

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
    assert result["targets_missed"] == [] and result["targets"]["speedup"] == ">= 5"


def test_bench_adapter_slowed_extend_misses_and_exits_1(monkeypatch, capsys):
    import time

    from coding_agent_rl.model.render import Renderer

    real = Renderer.extend

    def slow(self, *args, **kwargs):
        time.sleep(0.3)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Renderer, "extend", slow)
    code = cli.main(["bench", "adapter", "--context", "30000", "--json", "--repeat", "1"])
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert code == 1 and result["tokens_identical"] is True and result["speedup"] < 5
    assert result["targets_missed"] == [f"speedup >= 5 (got {result['speedup']})"]
    assert "exit 1" in captured.err


def test_bench_adapter_rejects_a_tiny_context(capsys):
    assert cli.main(["bench", "adapter", "--context", "100"]) == 2
    assert "--context" in capsys.readouterr().err


def test_bench_adapter_capacity_json_line(capsys):
    """The capacity mode at a tiny size: real processes, both runs, every turn recorded."""
    args = ["--sessions", "4", "--turns", "3", "--processes", "2", "--system-tokens", "300"]
    code = cli.main(["bench", "adapter", *args, "--json"])  # two rounds by default
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    result = json.loads(lines[-1])
    adapter, direct = result["adapter"], result["direct"]
    assert result["recorded_fraction"] == 1.0 and result["recorded_turns"] == 24
    assert len(result["rounds"]) == 2 and all(
        r["adapter"]["recorded_turns"] == 12 for r in result["rounds"]
    )
    assert adapter["turns"] == direct["turns"] == 8  # turns 2..3 of each session
    assert adapter["first_turns"]["turns"] == 4
    assert {"adapter_0", "adapter_1", "policy", "clients", "machine"} <= set(adapter["cpu"])
    assert adapter["turns_per_s"] > 0 and adapter["turn_ms_p99"] >= adapter["turn_ms_p50"] > 0
    assert result["ratio_vs_direct"] > 0 and result["baseline"]["kind"] == "run"
    assert result["adapter_cpu_ms_per_turn"] > 0
    assert result["targets_missed"] == []


def test_bench_adapter_capacity_with_the_scripted_policy(capsys):
    args = ["--sessions", "2", "--turns", "2", "--policy", "scripted", "--system-tokens", "300"]
    args += ["--no-baseline", "--rounds", "1", "--json"]
    assert cli.main(["bench", "adapter", *args]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["policy"] == "scripted" and "direct" not in result
    assert result["baseline"]["kind"] == "none"
    assert result["recorded_turns"] == 4 and result["recorded_fraction"] == 1.0


def test_bench_adapter_capacity_rejects_one_turn(capsys):
    assert cli.main(["bench", "adapter", "--sessions", "4", "--turns", "1"]) == 2
    assert "--turns" in capsys.readouterr().err
