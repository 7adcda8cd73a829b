"""Tree rollouts end to end: real Codex in a Docker sandbox, a scripted policy (Claude Code
goes through slime's ``generate`` as a tree in test_slime_fidelity.py).

The root writes two files, then solves the task with the gold patch. A branch at turn 2 replays
the root's first two turns (the CLI gets the same replies and runs the same tools again in a
fresh sandbox, so the same files appear), then the policy samples anew: the script starts over
for the branch's session, so the branch's turn 2 is the script's first step, not the root's turn
2. Every trained token of the branch is one the policy sampled there; the replayed prefix is
context only. Divergence between the replayed prompts and the root's is counted per CLI.
"""

from __future__ import annotations

import pytest
from support.rollout_helpers import (
    base_sample,
    rollout_config,
    runtime,
    solve_steps,
    task_rule,
    write_script,
)

from coding_agent_rl.rollout.branch import TreeSpec, run_tree

pytestmark = [pytest.mark.docker, pytest.mark.agents]

K = 2
STEPS = [
    {"shell": "echo one > one.txt && cat one.txt"},
    {"shell": "echo two > two.txt && cat two.txt"},
]


def calls(turn) -> list:
    return [c["function"] for c in turn.assistant.get("tool_calls") or []]


async def test_a_branch_replays_the_roots_first_turns_then_samples_its_own(rows, tmp_path):
    agent, row = "codex", rows["slugify"]
    script = tmp_path / "script.json"
    spec = write_script(script, [task_rule(row, [*STEPS, *solve_steps(row)])])
    async with runtime(policy=spec, agent=agent, rollout=rollout_config(tmp_path / "out")) as rt:
        tree = await run_tree(rt.runner, row, base_sample(row, 0), TreeSpec(1, K), [7])
    assert len(tree) == 2, [m.outcome.record for m in tree]
    root, branch = tree
    assert root.outcome.record["reward"] == 1.0, root.outcome.record
    assert branch.outcome.record["reward"] == 1.0, branch.outcome.record

    # Tree labels on every sample and record.
    for s in root.outcome.samples:
        assert (s.metadata["tree_id"], s.metadata["parent_rollout_id"]) == (0, None)
        assert s.metadata["branch_turn"] is None and s.metadata["tree_stretch"][0] in (0, K)
    assert {tuple(s.metadata["tree_stretch"]) for s in root.outcome.samples} >= {(0, K)}
    for s in branch.outcome.samples:
        s.check()
        assert s.rollout_id == 7
        assert (s.metadata["tree_id"], s.metadata["parent_rollout_id"]) == (0, 0)
        assert s.metadata["branch_turn"] == K

    # The replayed prefix: the same replies and tool calls as the root's first K turns.
    by_root = {t.index: t for t in root.turns}
    replayed = [t for t in branch.turns if t.replay is not None]
    assert len(replayed) == K
    for t in replayed:
        original = by_root[t.replay["of"]]
        assert t.output_ids == original.output_ids
        assert calls(t) == calls(original)
        assert set(t.output_logprobs) == {0.0}
    summary = branch.outcome.record["tree"]["replay"]
    assert summary["replayed"] == K and summary["planned"] == K
    assert summary["diverged"] == sum(bool(t.replay["diverged"]) for t in replayed)
    # Codex's exec output carries a random chunk id: the second replayed prompt differs from the
    # root's there, and the record says where and what each side read.
    assert summary["diverged"] == 1
    first = summary["first_divergence"]
    assert first["of"] == 1 and first["first_diff"] < first["prompt_len"]
    assert first["ours"] != first["recorded"] and "Wall time" in first["recorded"]
    # Then its own policy: the script starts over, so the branch's turn K is step 0 again.
    fresh = [t for t in branch.turns if t.replay is None]
    assert fresh and fresh[0].output_ids != by_root[K].output_ids
    assert "one.txt" in str(calls(fresh[0])) and "one.txt" not in str(calls(by_root[K]))

    # The same files in both sandboxes (the replayed tools ran again in the branch's).
    for m in tree:
        diff = (tmp_path / "out" / m.outcome.record["artifacts"]["diff"]).read_text()
        assert "one.txt" in diff and "two.txt" in diff

    # Token exactness: the branch trains exactly the tokens its policy sampled, with their
    # logprobs; the root trains each of its turns once across its stretches.
    for member in tree:
        turns = {t.index: t for t in member.turns}
        trained = {}
        for s in member.outcome.samples:
            start = len(s.tokens) - s.response_length
            for index, offset, length in s.metadata["trained_turns"]:
                t = turns[index]
                assert t.replay is None, "a replayed turn was trained"
                assert s.tokens[offset : offset + length] == t.output_ids[:length]
                got = s.rollout_log_probs[offset - start : offset - start + length]
                assert got == pytest.approx(t.output_logprobs[:length])
                trained[index] = trained.get(index, 0) + length
            assert sum(s.loss_mask) == sum(n for _, _, n in s.metadata["trained_turns"])
        want = {i: len(t.output_ids) for i, t in turns.items() if t.replay is None}
        assert {i: n for i, n in trained.items()} == {i: n for i, n in want.items() if n}
