"""``bench branch``: a real adapter in front of the real ``hf:`` CPU policy (a tiny random Qwen3);
reaching turn k by prefix replay samples no token and every trained token of the tree rescores
to its recorded logprob (verify-logprobs). With the replayed prefix trained in the branch (the
rule off), the tree's logprobs no longer match and the benchmark fails."""

from __future__ import annotations

import json

from coding_agent_rl import cli
from coding_agent_rl.trajectory import samples as traj_samples

ARGS = ["--turns", "3", "--branch-at", "2", "--branches", "1", "--max-new-tokens", "6"]


def run_bench(capsys, model_dir, *extra: str) -> tuple[int, dict]:
    code = cli.main(["bench", "branch", "--model", str(model_dir), *ARGS, "--json", *extra])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_replay_reaches_turn_k_without_sampling_and_the_tree_is_token_exact(
    tiny_model_dir, capsys, monkeypatch
):
    # --no-check: the speedup is a timing target (load moves it); the rest are exact.
    code, result = run_bench(capsys, tiny_model_dir, "--no-check")
    assert code == 0 and "speedup" in result["targets"], result
    assert [m for m in result["targets_missed"] if not m.startswith("speedup ")] == [], result
    (row,) = result["per_branch"]
    assert row["replayed_turns"] == 2 and row["replay_tokens_sampled"] == 0
    assert row["generate_tokens_sampled"] == result["tokens_saved"] == 12
    # root: 3 turns (cut at 2: two samples), branch: its 1 sampled turn; 6 tokens a turn
    assert result["tree_samples"] == 3 and result["trained_tokens_verified"] == 4 * 6
    assert result["baseline"]["kind"] == "run"

    # The rule off: replayed turns trained in the branch as if sampled there.
    real = traj_samples._owned_by

    def train_replayed(owner, seg_id, train, turn):
        replay, turn.replay = turn.replay, None
        try:
            return real(owner, seg_id, train, turn)
        finally:
            turn.replay = replay

    monkeypatch.setattr(traj_samples, "_owned_by", train_replayed)
    code, result = run_bench(capsys, tiny_model_dir)
    assert result["trained_tokens_verified"] == 4 * 6 + 2 * 6  # the prefix trained twice
    assert "logprob_max_abs" in [m.split()[0] for m in result["targets_missed"]] and code == 1
