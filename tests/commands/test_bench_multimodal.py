"""``bench multimodal``: merge-once vs concatenate-every-turn on real Qwen2-VL processor chunks.
The measurement runs in-process here (the command runs each way in a child process); the bytes
copied are measured by torch's memory profiler: n chunks once vs the triangle sum every turn. A
buffer broken on purpose (merging every turn) misses the targets and exits 1."""

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
    assert code == 0 and result["bench"] == "multimodal"
    assert (
        result["baseline"]["kind"] == "modelled"
        and "no production code" in result["baseline"]["models"]
    )
    assert result["results_identical"] is True
    assert result["copied_exponent"]["merge_once"] == 1.0
    assert result["copied_exponent"]["every_turn"] > 1.5
    assert result["merge_once_copied_over_total"] == 1.0
    assert set(result["targets"]) == set(multimodal.TARGETS)


def test_a_buffer_that_merges_every_turn_misses_and_exits_1(monkeypatch, capsys):
    from coding_agent_rl.multimodal.buffer import TrainInputsBuffer, merge_every_turn

    def add(self, chunk):  # broken on purpose: a full concatenation on every turn
        self.chunks = [merge_every_turn(self.chunks[0] if self.chunks else None, chunk)]

    monkeypatch.setattr(TrainInputsBuffer, "add", add)
    monkeypatch.setattr(multimodal, "_run_child", lambda way, n, size, repeat: multimodal.child(way, n, size, 1))  # fmt: skip
    code = cli.main(["bench", "multimodal", "--turns", "8", "--size", "56", "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert code == 1 and out["results_identical"] is True and "exit 1" in captured.err
    missed = {m.split()[0] for m in out["targets_missed"]}
    assert {"copied_ratio_at_turns", "merge_once_copied_over_total"} <= missed
