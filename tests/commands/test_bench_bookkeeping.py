"""``bench bookkeeping``: ours and the re-implemented old path keep the same books (same files,
same figures), and the command reports both sizes, its baseline and its targets."""

from __future__ import annotations

import json
import pathlib

from coding_agent_rl import cli
from coding_agent_rl.commands.bench import bookkeeping


def test_both_ways_write_the_same_results(tmp_path: pathlib.Path) -> None:
    for way in ("ours", "baseline"):
        ms = bookkeeping.per_rollout_ms(way, (3, 30), 5, tmp_path)
        assert set(ms) == {3, 30} and all(v > 0 for v in ms.values())
    ours = (tmp_path / "ours-30" / "results.jsonl").read_text().splitlines()
    old = (tmp_path / "baseline-30" / "results.jsonl").read_text().splitlines()
    assert len(ours) == len(old) == 35
    for a, b in zip(ours, old, strict=True):
        assert {k: v for k, v in json.loads(a).items() if k != "attempt"} == json.loads(b)
    # Ours writes no sample for an infrastructure failure (it trains nothing).
    infra = sum(json.loads(x)["failure_kind"] == "infra" for x in old)
    samples = (tmp_path / "ours-30" / "samples.jsonl").read_text().splitlines()
    assert infra and len(samples) == 35 - infra


def test_command_reports_both_sizes_baseline_and_targets(capsys) -> None:
    code = cli.main(["bench", "bookkeeping", "--records", "200", "--measure", "20", "--json", "--no-check"])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and result["bench"] == "bookkeeping" and result["baseline"]["kind"] == "run"
    assert set(result["ours_ms_per_rollout"]) == {"at_20", "at_200"}
    assert set(result["baseline_ms_per_rollout"]) == {"at_20", "at_200"}
    assert result["ours_growth"] > 0 and result["speedup_at_records"] > 0
    assert set(result["targets"]) == set(bookkeeping.TARGETS)


def test_a_writer_that_re_reads_every_record_misses_and_exits_1(monkeypatch, capsys) -> None:
    """Ours slowed on purpose: each finished rollout re-reads the whole run (the old cost)."""
    from coding_agent_rl.rollout.outputs import RunWriter, read_jsonl, summarize

    real = RunWriter.add

    def add(self, samples, record):
        real(self, samples, record)
        summarize(list(read_jsonl(self.results_path)))

    monkeypatch.setattr(RunWriter, "add", add)
    code = cli.main(["bench", "bookkeeping", "--records", "300", "--measure", "20", "--json"])
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert code == 1 and "exit 1" in captured.err
    assert result["speedup_at_records"] < 5
    assert any(m.startswith("speedup_at_records >= 5") for m in result["targets_missed"])
