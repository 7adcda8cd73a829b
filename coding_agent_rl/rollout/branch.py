"""Tree rollouts: a root rollout, then branches that replay its first k turns and sample anew.

A branch is an ordinary rollout of the same task, CLI and prompt in a fresh sandbox whose
adapter session replays the root's first k turns (adapter/replay.py): the CLI gets the root's
replies, its tools run again, and from turn k the policy samples. Replayed turns are untrained
in the branch; the root's samples are cut at the branch points (trajectory/branching.py) so
each stretch can take its own advantage (``generate.post_process_tree_rewards``).

Divergence rule: a replayed request whose rendered prompt differs from the root's still gets the
root's reply and the branch goes on. Its trained tokens are sampled by the policy in the context
actually sent, so they stay exact; what the divergence costs is the claim that the branch shares
the root's prefix. It is recorded, never hidden: ``record["tree"]["replay"]`` counts the
diverged turns and keeps the first one's token index and decoded snippets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from coding_agent_rl.adapter.replay import ReplayPlan
from coding_agent_rl.rollout.act import BranchTap
from coding_agent_rl.rollout.config import RolloutConfig, RolloutOutcome
from coding_agent_rl.rollout.runner import RolloutRunner
from coding_agent_rl.trajectory import build_samples
from coding_agent_rl.trajectory.branching import in_stretch, pick_branch_turns, stretches
from coding_agent_rl.trajectory.turn import Turn
from coding_agent_rl.types import Sample

# per-sample labels build_samples sets; not carried from the root's samples into its stretches
_LABELS = (
    "segment",
    "segment_index",
    "num_segments",
    "turns",
    "turn_range",
    "trained_turns",
    "truncated",
    "truncation_reason",
    "ill_formed",
    "use_tool",
    "realigned_tokens",
    "dispatch_turn",
    "subagent_result_turn",
    "aux_reason",
    "rollout_reward",
)
GRADED_KINDS = (None, "model")  # a root that failed otherwise (infra, aborted) grows no tree


@dataclasses.dataclass
class TreeMember:
    """One rollout of a tree: its outcome and its recorded turns (replay marks included)."""

    outcome: RolloutOutcome
    turns: list[Turn]


@dataclasses.dataclass
class TreeSpec:
    """``branches`` branches at turn ``branch_at`` each, or (``branch_at`` None) one at each of
    the ``branches`` turns where the root's policy was least sure."""

    branches: int = 2
    branch_at: int | None = None

    def turns(self, root_turns: Sequence[Turn]) -> list[int]:
        """The branch turns for a root with ``root_turns`` (those past its end are dropped)."""
        if self.branch_at is None:
            return pick_branch_turns(root_turns, self.branches)
        if not 0 < self.branch_at < len(root_turns):
            return []
        return [self.branch_at] * self.branches


def replay_summary(turns: Sequence[Turn], k: int) -> dict[str, Any]:
    """What a branch's replay did: turns replayed, how many diverged, the first divergence."""
    marks = [t.replay for t in sorted(turns, key=lambda t: t.index) if t.replay is not None]
    diverged = [m for m in marks if m.get("diverged")]
    return {
        "planned": k,
        "replayed": len(marks),
        "diverged": len(diverged),
        "first_divergence": diverged[0] if diverged else None,
        "tokens_replayed": sum(len(t.output_ids) for t in turns if t.replay is not None),
        "tokens_sampled": sum(len(t.output_ids) for t in turns if t.replay is None),
    }


def _tag(outcome: RolloutOutcome, tree: dict[str, Any]) -> None:
    for s in outcome.samples:
        s.metadata.update(
            tree_id=tree["tree_id"],
            parent_rollout_id=tree["parent_rollout_id"],
            branch_turn=tree["branch_turn"],
        )
    outcome.record["tree"] = tree


def recut_root(
    outcome: RolloutOutcome,
    turns: Sequence[Turn],
    cuts: Sequence[int],
    config: RolloutConfig,
    decode: Callable[[list[int]], str] | None,
) -> list[Sample]:
    """The root's samples, one set per stretch between branch points (``tree_stretch``)."""
    first = outcome.samples[0]
    base = dataclasses.replace(
        first, metadata={k: v for k, v in first.metadata.items() if k not in _LABELS}
    )
    reward = float(outcome.record.get("reward") or 0.0)
    out: list[Sample] = []
    for lo, hi in stretches(cuts, len(turns)):
        for s in build_samples(
            turns,
            base,
            reward=reward,
            reward_mode=config.reward_mode,
            max_context=config.max_context,
            max_response=config.max_response,
            decode=decode,
            train=in_stretch(lo, hi),
        ):
            s.metadata["tree_stretch"] = [lo, hi]
            out.append(s)
    return out


async def grow_root(
    runner: RolloutRunner,
    row: Any,
    base: Sample,
    spec: TreeSpec,
    *,
    sampling_params: dict[str, Any] | None = None,
) -> tuple[TreeMember, list[int]]:
    """Run the root; returns it (samples cut at the branch points) and the branch turns (none
    when it was not graded or is too short to branch)."""
    tap = BranchTap()
    t0 = time.monotonic()
    root = await runner.run(row, base, sampling_params=sampling_params, tap=tap)
    turns = tap.turns
    ks = spec.turns(turns) if root.record.get("failure_kind") in GRADED_KINDS else []
    tree_id = root.record["rollout_id"]
    _tag(root, {"tree_id": tree_id, "parent_rollout_id": None, "branch_turn": None})
    root.record["tree"].update(
        branch_turns=ks, root_turns=len(turns), wall_s=round(time.monotonic() - t0, 3)
    )
    if ks:
        root.samples = (
            recut_root(root, turns, ks, runner.config, getattr(runner.act, "decode", None))
            or root.samples
        )
    return TreeMember(root, turns), ks


async def grow_branch(
    runner: RolloutRunner,
    row: Any,
    base: Sample,
    root: TreeMember,
    k: int,
    *,
    sampling_params: dict[str, Any] | None = None,
) -> TreeMember:
    """A branch of ``root`` at turn ``k``, as the rollout ``base`` (its index and rollout id)."""
    tree_id = root.outcome.record["rollout_id"]
    tap = BranchTap(replay=ReplayPlan.from_turns(root.turns, k))
    b = dataclasses.replace(base, metadata=dict(base.metadata))
    start = time.monotonic()
    out = await runner.run(row, b, sampling_params=sampling_params, tap=tap)
    _tag(out, {"tree_id": tree_id, "parent_rollout_id": tree_id, "branch_turn": k})
    out.record["tree"].update(
        replay=replay_summary(tap.turns, k), wall_s=round(time.monotonic() - start, 3)
    )
    return TreeMember(out, tap.turns)


async def run_tree(
    runner: RolloutRunner,
    row: Any,
    base: Sample,
    spec: TreeSpec,
    branch_indices: Sequence[int],
    *,
    sampling_params: dict[str, Any] | None = None,
) -> list[TreeMember]:
    """The root, then one member per branch (``branch_indices[i]``: the i-th branch's sample
    index and rollout id). A root that was not graded, or too short to branch, stays alone."""
    root, ks = await grow_root(runner, row, base, spec, sampling_params=sampling_params)
    branches = await asyncio.gather(
        *(
            grow_branch(
                runner,
                row,
                dataclasses.replace(base, index=i, rollout_id=i),
                root,
                k,
                sampling_params=sampling_params,
            )
            for k, i in zip(ks, branch_indices, strict=False)
        )
    )
    return [root, *branches]


class TreeGroups:
    """``generate()`` with tree rollouts: a group of n samples becomes one tree. slime numbers
    a group's samples ``index = group_index * n + j``: j = 0 runs the root, j >= 1 waits for it
    and runs branch j (branch turns from :class:`TreeSpec` with n - 1 branches, reused in turn
    when the root has fewer). Samples numbered otherwise take slots in order of arrival. When
    the root grows no tree (not graded, too short), the others run as plain rollouts. A group
    is forgotten once its n samples have arrived."""

    def __init__(self, branch_at: int | None):
        self.branch_at = branch_at
        self._groups: dict[Any, list[Any]] = {}  # key -> [root future, arrivals]

    def _slot(self, base: Sample, n: int, arrivals: int) -> int:
        if base.index is not None and base.group_index is not None:
            j = base.index - base.group_index * n
            if 0 <= j < n:
                return j
        return arrivals

    async def run(
        self,
        runner: RolloutRunner,
        row: Any,
        base: Sample,
        group_size: int,
        sampling_params: dict[str, Any] | None,
    ) -> RolloutOutcome:
        if group_size < 2 or base.group_index is None:
            return await runner.run(row, base, sampling_params=sampling_params)
        key = (row.instance_id, base.group_index)
        entry = self._groups.setdefault(key, [asyncio.get_running_loop().create_future(), 0])
        future: asyncio.Future[Any] = entry[0]
        slot = self._slot(base, group_size, entry[1])
        entry[1] += 1
        if entry[1] >= group_size:
            self._groups.pop(key, None)
        if slot == 0:
            spec = TreeSpec(branches=group_size - 1, branch_at=self.branch_at)
            try:
                root, ks = await grow_root(runner, row, base, spec, sampling_params=sampling_params)
            except BaseException:
                if not future.done():
                    future.set_result((None, []))
                raise
            if not future.done():
                future.set_result((root, ks))
            return root.outcome
        root, ks = await asyncio.shield(future)
        if root is None or not ks:
            return await runner.run(row, base, sampling_params=sampling_params)
        member = await grow_branch(
            runner, row, base, root, ks[(slot - 1) % len(ks)], sampling_params=sampling_params
        )
        return member.outcome


async def run_trees(
    rows: list[Any],
    config: Any,
    writer: Any,
    spec: TreeSpec,
    *,
    concurrency: int = 4,
    n_samples: int = 1,
    info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``run --branch-at/--branches``: each of the ``n_samples`` rollouts per task is the root of
    a tree; roots and branches are written as rollouts (branch ``i`` of root ``r`` has sample
    index ``total + r * branches + i``). In-process only; returns the run's summary."""
    from coding_agent_rl.rollout.batch import Progress, make_samples
    from coding_agent_rl.rollout.runtime import Runtime

    todo = make_samples(rows, n_samples)
    total = len(todo)
    gate = asyncio.Semaphore(concurrency)
    runtime = Runtime(config)
    progress = Progress(total * (spec.branches + 1))
    t0 = time.monotonic()
    try:
        await runtime.start()

        runner = runtime.runner
        assert runner is not None

        async def one(row: Any, base: Sample) -> None:
            assert base.index is not None
            indices = [total + base.index * spec.branches + i for i in range(spec.branches)]
            async with gate:
                tree = await run_tree(
                    runner,
                    row,
                    base,
                    spec,
                    indices,
                    sampling_params=config.sampling_defaults or None,
                )
            for member in tree:
                member.outcome.record["agent"] = config.agent
                writer.add(member.outcome.samples, member.outcome.record)
                progress.update(member.outcome.record)

        await asyncio.gather(*(one(r, s) for r, s in todo))
    finally:
        progress.close()
        await runtime.stop()
        summary = writer.summary(
            **(info or {}),
            agent=config.agent,
            sandbox=config.rollout.backend,
            policy=config.policy or config.sglang_url,
            tokenizer=config.tokenizer,
            tree={"branches": spec.branches, "branch_at": spec.branch_at},
            wall_s=round(time.monotonic() - t0, 2),
        )
        writer.close(summary)
    return summary
