"""``coding-agent-rl bench branch``: reaching turn k of a rollout by prefix replay vs by sampling.

A real adapter in front of the CPU ``hf:`` policy (the tiny random-weight Qwen3 of
policy/tiny_vlm.py, or ``--model DIR``) serves a deterministic chat client: a root session of
``--turns`` turns (each reply echoed back with a fixed tool result). Then, per branch, two
sessions reach turn ``--branch-at`` K in the same process: one whose first K requests are
answered from the root's recorded turns (adapter/replay.py), and the baseline, one that samples
those K turns from the policy. Each branch then samples its remaining turns; the tree's samples
(the root cut at K, the branches with their replayed prefix untrained) are rescored with the same
model (verify-logprobs) so every trained token is checked.

Targets: no policy token sampled to reach K by replay and every replayed prompt identical to
the root's; replay at least ``TARGET_SPEEDUP`` times faster than sampling the K turns; the tree's
trained tokens' logprobs within ``TOLERANCE`` of the rescoring.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import tempfile
import time
from typing import Any

from coding_agent_rl.commands.bench import add_check_argument, missed_targets, report

TARGET_SPEEDUP = 5.0
TOLERANCE = 1e-3
SYSTEM = "You are a coding agent. Work in small steps and report what you did."
TASK = "Fix the off-by-one error in pager/paginate.py and run the tests."


def tool_result(i: int) -> str:
    return f"Tool output {i}: ran `pytest -q tests/test_pager.py`; 3 passed, {i % 3} failed."


class Client:
    """A deterministic chat CLI: system + task, then each reply echoed with a tool result."""

    def __init__(self, url: str, sid: str):
        self.url, self.sid = url, sid
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TASK},
        ]

    async def turn(self, http: Any, i: int) -> None:
        headers = {"Authorization": f"Bearer {self.sid}"}
        body = {"model": "policy", "messages": self.messages}
        async with http.post(f"{self.url}/v1/chat/completions", json=body, headers=headers) as r:
            if r.status != 200:
                raise RuntimeError(f"adapter answered {r.status}: {(await r.text())[:300]}")
            reply = (await r.json())["choices"][0]["message"]
        self.messages += [reply, {"role": "user", "content": tool_result(i)}]


async def _session(
    adapter: Any, url: str, sid: str, turns: int, replay: Any = None, sampling: Any = None
) -> tuple[list[Any], float, float]:
    """Run ``turns`` turns; returns the recorded turns, seconds to the first non-replayed turn
    (all of them when every turn is replayed) and seconds in all."""
    import aiohttp

    adapter.sessions.open(sid, sampling_fixed=sampling, replay=replay)
    client = Client(url, sid)
    reach = None
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as http:
        for i in range(turns):
            if replay is not None and i == len(replay.turns):
                reach = time.perf_counter() - t0
            await client.turn(http, i)
    total = time.perf_counter() - t0
    assert await adapter.sessions.settled(sid, timeout=10)
    recorded = adapter.sessions.pop(sid)
    return recorded, total if reach is None else reach, total


async def measure(
    model_dir: pathlib.Path, tokenizer: Any, turns: int, k: int, branches: int, max_new: int
) -> dict[str, Any]:
    from coding_agent_rl.adapter.replay import ReplayPlan
    from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
    from coding_agent_rl.model.render import Renderer
    from coding_agent_rl.policy.hf import HFPolicy
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.policy.verify import load_model, verify
    from coding_agent_rl.trajectory import build_samples
    from coding_agent_rl.trajectory.branching import in_stretch, stretches
    from coding_agent_rl.types import Sample

    policy = PolicyServer(HFPolicy(str(model_dir)), tokenizer)
    policy_url = await policy.start()
    adapter = AdapterServer(
        AdapterConfig(
            sglang_url=policy_url,
            renderer=Renderer(tokenizer),
            reasoning_parser=None,
            sampling_defaults={"max_new_tokens": max_new},
        )
    )
    url = await adapter.start()
    sampling = {"max_new_tokens": max_new, "temperature": 1.0}
    try:
        root, _, root_s = await _session(adapter, url, "root", turns, sampling=sampling)
        plan = ReplayPlan.from_turns(root, k)
        rows, trees = [], []
        for b in range(branches):
            gen_turns, gen_s, _ = await _session(adapter, url, f"gen-{b}", k, sampling=sampling)
            branch, replay_s, branch_s = await _session(
                adapter, url, f"branch-{b}", turns, replay=plan, sampling=sampling
            )
            replayed = [t for t in branch if t.replay is not None]
            rows.append(
                {
                    "replay_s": round(replay_s, 4),
                    "generate_s": round(gen_s, 4),
                    "replay_tokens_sampled": sum(
                        len(t.output_ids) for t in branch[:k] if t.replay is None
                    ),
                    "generate_tokens_sampled": sum(len(t.output_ids) for t in gen_turns),
                    "replayed_turns": len(replayed),
                    "diverged_turns": sum(bool(t.replay["diverged"]) for t in replayed),
                    "branch_s": round(branch_s, 4),
                }
            )
            trees.append(branch)
    finally:
        await adapter.stop()
        await policy.stop()

    meta = {"tree_id": 0}
    samples = []
    for lo, hi in stretches([k], len(root)):
        base = Sample(index=0, rollout_id=0, metadata={**meta, "tree_stretch": [lo, hi]})
        samples += build_samples(root, base, reward=0.0, train=in_stretch(lo, hi))
    for b, branch in enumerate(trees):
        base = Sample(
            index=b + 1,
            rollout_id=b + 1,
            metadata={**meta, "parent_rollout_id": 0, "branch_turn": k},
        )
        samples += build_samples(branch, base, reward=0.0)
    report_ = verify(samples, load_model(model_dir))
    replay_s = sum(r["replay_s"] for r in rows)
    gen_s = sum(r["generate_s"] for r in rows)
    return {
        "bench": "branch",
        "turns": turns,
        "branch_at": k,
        "branches": branches,
        "max_new_tokens": max_new,
        "root_s": round(root_s, 3),
        "per_branch": rows,
        "tokens_saved": sum(
            r["generate_tokens_sampled"] - r["replay_tokens_sampled"] for r in rows
        ),
        "replay_tokens_sampled": sum(r["replay_tokens_sampled"] for r in rows),
        "diverged_turns": sum(r["diverged_turns"] for r in rows),
        "speedup": round(gen_s / replay_s, 1) if replay_s else None,
        "tree_samples": len(samples),
        "trained_tokens_verified": report_.trained,
        "logprob_max_abs": report_.max_abs,
        "baseline": {
            "kind": "run",
            "from": f"sampling the first {k} turns from the same hf: policy through the same "
            "adapter, same client, same process, once per branch",
        },
    }


def check(result: dict[str, Any]) -> dict[str, Any]:
    targets = {
        "replay_tokens_sampled": ("==", 0.0),
        "diverged_turns": ("==", 0.0),
        "speedup": (">=", TARGET_SPEEDUP),
        "logprob_max_abs": ("<=", TOLERANCE),
    }
    result["targets"] = {k: f"{op} {v:g}" for k, (op, v) in targets.items()}
    result["targets_missed"] = missed_targets(result, targets)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=pathlib.Path, help="hf: model dir (default: tiny Qwen3)")
    parser.add_argument("--turns", type=int, default=6, help="turns of the root")
    parser.add_argument("--branch-at", type=int, default=4, help="K: turns replayed per branch")
    parser.add_argument("--branches", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=16, help="per turn")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError
    from coding_agent_rl.policy.tiny_vlm import build_tiny_lm
    from coding_agent_rl.tokenizer import load_tokenizer

    if not 0 < args.branch_at < args.turns or args.branches < 1 or args.max_new_tokens < 1:
        raise UserError("need 0 < --branch-at < --turns, --branches >= 1, --max-new-tokens >= 1")
    if args.model is not None and not (args.model / "config.json").is_file():
        raise UserError(f"--model {args.model}: no config.json there")
    tokenizer = load_tokenizer("qwen3")
    with tempfile.TemporaryDirectory(prefix="bench-branch-") as tmp:
        model = args.model or build_tiny_lm(tmp, len(tokenizer))
        result = asyncio.run(
            measure(
                model, tokenizer, args.turns, args.branch_at, args.branches, args.max_new_tokens
            )
        )
    return report("branch", check(result), args)
