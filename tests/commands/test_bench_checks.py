"""``bench``'s verdicts without running a workload: missed targets exit 1 unless ``--no-check``,
a concurrency sweep reports where the rollout overhead target stops holding, and every result
names its baseline. The rollout benchmark's measurement is replaced by canned records; its
summarising, checking and printing are the real ones."""

from __future__ import annotations

import json

import pytest

from coding_agent_rl import cli
from coding_agent_rl.commands.bench import missed_targets
from coding_agent_rl.commands.bench import rollout as bench_rollout


def record(i: int, overhead: float, *, reward: float = 1.0, kind: str | None = None) -> dict:
    agent, tests = 3.0, 0.5
    return {
        "instance_id": f"task{i}",
        "sample_index": i,
        "reward": reward,
        "failure_kind": kind,
        "tests_s": tests,
        "timings": {"agent_s": agent, "total_s": agent + tests + overhead},
        "profile": {"grading_prepare": 1.0, "agent_sandbox_destroy": 0.3, "agent_cli": 2.9},
    }


def test_missed_targets_names_each_miss_and_counts_unmeasured_as_missed():
    targets = {"a": ("<=", 1.1), "b": (">=", 30.0), "c": ("<=", 5.0)}
    assert missed_targets({"a": 1.2, "b": 31.0, "c": None}, targets) == [
        "a <= 1.1 (got 1.2)",
        "c <= 5 (not measured)",
    ]
    assert missed_targets({"a": 1.1, "b": 29.9, "c": 5.0}, targets) == ["b >= 30 (got 29.9)"]
    assert missed_targets({"a": 1.1, "b": 30.0}, targets) == ["c <= 5 (not measured)"]


def test_rollout_overhead_counts_every_rollout_not_only_solved():
    records = [record(0, 1.0), record(1, 1.2), record(2, 4.0, reward=0.0, kind="model")]
    out = bench_rollout.summarize(records, n=3, concurrency=2, wall_s=10.0)
    assert out["overhead_s_p50"] == 1.2  # median of 1.0, 1.2, 4.0
    assert out["overhead_s_p50_solved"] == 1.1 and out["overhead_s_max"] == 4.0
    assert [r["overhead_s"] for r in out["rollouts"]] == [1.0, 1.2, 4.0]
    assert [r["outcome"] for r in out["rollouts"]] == ["solved", "solved", "unsolved"]
    assert out["outcomes"] == {"solved": 2, "unsolved": 1} and out["failures"] == 1
    assert out["baseline"]["kind"] == "modelled" and "marker poll" in out["baseline"]["from"]
    assert out["targets_missed"] == []
    slow = bench_rollout.summarize([record(0, 2.0)], n=1, concurrency=4, wall_s=5.0)
    assert slow["targets_missed"] == ["overhead_s_p50 <= 1.5 (got 2.0)"]


@pytest.fixture
def canned(monkeypatch):
    """``bench rollout`` with canned records: overhead 1.0 s at concurrency 1, 2.0 s above."""

    async def fake_bench(*, n, concurrency, agent, backend, out, sandbox_options, agent_network):
        overhead = 1.0 if concurrency == 1 else 2.0
        records = [record(i, overhead) for i in range(n)]
        summary = bench_rollout.summarize(records, n=n, concurrency=concurrency, wall_s=1.0)
        return summary, records

    monkeypatch.setattr(bench_rollout, "bench", fake_bench)


def test_bench_rollout_sweep_finds_the_knee_and_exits_1(canned, capsys):
    argv = ["bench", "rollout", "--sandbox", "local", "--n", "2", "--concurrency", "1,2,4"]
    assert cli.main([*argv, "--json"]) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 2, 4]
    assert (out["target_holds_up_to"], out["target_stops_holding_at"]) == (1, 2)
    assert "c=2: overhead_s_p50 <= 1.5 (got 2.0)" in captured.err
    assert cli.main([*argv, "--json", "--no-check"]) == 0
    assert "ignored (--no-check)" in capsys.readouterr().err
    assert cli.main(["bench", "rollout", "--sandbox", "local", "--concurrency", "1"]) == 0
    assert cli.main(["bench", "rollout", "--sandbox", "local", "--concurrency", "0"]) == 2
    assert cli.main(["bench", "rollout", "--sandbox", "local", "--concurrency", "x"]) == 2


def test_bench_adapter_names_its_baseline_and_checks_tokens(capsys):
    from coding_agent_rl.commands.bench import adapter

    result = {"tokens_identical": True, "speedup": 20.0}
    assert adapter.check(dict(result), 30000)["targets_missed"] == []  # 5x below 65536
    assert adapter.check({"tokens_identical": True, "speedup": 4.0}, 30000)["targets_missed"] == [
        "speedup >= 5 (got 4.0)"
    ]
    assert adapter.check(dict(result), 65536)["targets_missed"] == ["speedup >= 30 (got 20.0)"]
    bad = adapter.check({"tokens_identical": False, "speedup": 50.0}, 65536)
    assert bad["targets_missed"] == ["tokens_identical == 1 (got False)"]
