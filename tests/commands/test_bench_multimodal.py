"""``bench multimodal``: merge-once vs concatenate-every-turn on real Qwen2-VL processor chunks.
The measurement runs in-process here (the command runs each way in a child process); the bytes
copied are counted from the tensors: n chunks once vs the triangle sum every turn."""

from __future__ import annotations

import json

from coding_agent_rl import cli
from coding_agent_rl.commands.bench import multimodal


def test_each_way_copies_what_its_order_says_and_both_agree():
    once = multimodal.child("once", 6, 56, 1)
    every = multimodal.child("every", 6, 56, 1)
    chunk = once["total_bytes"] // 6
    assert once["copied_bytes"] == once["total_bytes"] == every["total_bytes"]
    assert every["copied_bytes"] == chunk * (1 + 2 + 3 + 4 + 5 + 6)  # O(n^2)
    assert once["digest"] == every["digest"] != ""


def test_command_reports_baseline_targets_and_exit_status(monkeypatch, capsys):
    monkeypatch.setattr(multimodal, "_run_child", lambda way, n, size, repeat: multimodal.child(way, n, size, 1))  # fmt: skip
    code = cli.main(["bench", "multimodal", "--turns", "8", "--size", "56", "--json", "--no-check"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and result["bench"] == "multimodal" and result["baseline"]["kind"] == "run"
    assert result["results_identical"] is True
    assert result["copied_exponent"]["merge_once"] == 1.0
    assert result["copied_exponent"]["every_turn"] > 1.5
    assert result["merge_once_copied_over_total"] == 1.0
    assert set(result["targets"]) == set(multimodal.TARGETS)
    # a missed target exits 1 without --no-check
    monkeypatch.setattr(multimodal, "TARGETS", {"copied_ratio_at_turns": (">=", 1e9)})
    code = cli.main(["bench", "multimodal", "--turns", "4", "--size", "56", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and out["targets_missed"][0].startswith("copied_ratio_at_turns >= 1e+09")
