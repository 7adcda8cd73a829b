"""Figures for the report's summary and table rows, computed from the loaded run.

``summary.json`` wins where it has a figure (it is the run's own account); everything else is
derived from ``results.jsonl`` so a partial or killed run still gets a full summary.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Any

from coding_agent_rl.report.load import Rollout, RunData

PHASES = ("sandbox_s", "install_s", "agent_s", "diff_s", "grade_s")
PHASE_LABELS = {
    "sandbox_s": "sandbox",
    "install_s": "install",
    "agent_s": "agent",
    "diff_s": "diff",
    "grade_s": "grade",
    "total_s": "total",
}
SOLVED_REWARD = 1.0 - 1e-9


def num(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def outcome(result: dict[str, Any]) -> str:
    """``infra`` | ``model`` | ``solved`` | ``unsolved`` | ``unknown`` (no reward yet)."""
    kind = result.get("failure_kind")
    if kind in ("infra", "model"):
        return kind
    reward = num(result.get("reward"))
    if reward is None:
        return "unknown"
    return "solved" if reward >= SOLVED_REWARD else "unsolved"


def trained_tokens(rollout: Rollout) -> int | None:
    metrics = rollout.result.get("metrics") or {}
    n = metrics.get("tokens_trained") if isinstance(metrics, dict) else None
    if isinstance(n, int):
        return n
    if not rollout.samples:
        return None
    return sum(
        s.get("trained_tokens", sum(1 for m in s.get("loss_mask") or [] if m))
        for s in rollout.samples
    )


@dataclasses.dataclass
class PhaseTiming:
    phase: str
    label: str
    p50: float | None
    p90: float | None
    n: int


@dataclasses.dataclass
class Summary:
    total: int
    solved: int
    mean_reward: float | None
    failures: dict[str, int]
    samples: int | None
    tokens_trained: int | None
    wall_s: float | None
    timings: list[PhaseTiming]  # PHASES then total_s
    instances: int
    instances_solved: int
    groups: int
    groups_mixed: int  # groups whose rewards differ: the only ones with a GRPO signal
    groups_all_zero: int
    outcomes: dict[str, int]
    turns_p50: float | None = None  # model turns per rollout
    truncated: dict[str, int] = dataclasses.field(default_factory=dict)  # by truncation reason
    env_retries: int = 0  # native loop: environment steps retried


def _turn_figures(results: list[dict[str, Any]]) -> tuple[float | None, dict[str, int], int]:
    turns = [v for r in results if (v := num(r.get("turns"))) is not None]
    truncated: dict[str, int] = defaultdict(int)
    retries = 0
    for r in results:
        metrics: dict[str, Any] = r["metrics"] if isinstance(r.get("metrics"), dict) else {}
        if metrics.get("truncation_reason"):
            truncated[str(metrics["truncation_reason"])] += 1
        retries += int(num(metrics.get("env_retries")) or 0)
    return percentile(turns, 50), dict(truncated), retries


def _timings(run: RunData) -> list[PhaseTiming]:
    fallback = run.summary.get("timings_p50") or {}
    out = []
    for phase in (*PHASES, "total_s"):
        values = [
            v
            for r in run.rollouts
            if isinstance(r.result.get("timings"), dict)
            and (v := num(r.result["timings"].get(phase))) is not None
        ]
        p50 = percentile(values, 50)
        if p50 is None:
            p50 = num(fallback.get(phase)) if isinstance(fallback, dict) else None
        out.append(
            PhaseTiming(phase, PHASE_LABELS[phase], p50, percentile(values, 90), len(values))
        )
    return out


def summarize(run: RunData) -> Summary:
    s = run.summary
    results = [r.result for r in run.rollouts if not r.result.get("_synthesised")]
    outcomes: dict[str, int] = defaultdict(int)
    for r in run.rollouts:
        outcomes[outcome(r.result)] += 1
    graded = [r for r in results if r.get("failure_kind") != "infra"]  # infra is not a reward
    rewards = [v for r in graded if (v := num(r.get("reward"))) is not None]

    failures = {"infra": outcomes["infra"], "model": outcomes["model"]}
    if isinstance(s.get("failures_by_kind"), dict):
        failures.update(
            {str(k): int(v) for k, v in s["failures_by_kind"].items() if num(v) is not None}
        )

    by_instance: dict[str, bool] = {}
    groups: dict[Any, list[float]] = defaultdict(list)
    for r in run.rollouts:
        res = r.result
        inst = str(res.get("instance_id"))
        by_instance[inst] = by_instance.get(inst, False) or outcome(res) == "solved"
        if res.get("failure_kind") == "infra":
            continue  # an infra failure says nothing about the policy
        gkey = res.get("group_index") if res.get("group_index") is not None else inst
        reward = num(res.get("reward"))
        if reward is not None:
            groups[gkey].append(reward)

    tokens = s.get("tokens_trained")
    if not isinstance(tokens, int):
        counts = [trained_tokens(r) for r in run.rollouts]
        tokens = (
            sum(c for c in counts if c is not None) if any(c is not None for c in counts) else None
        )
    samples = s.get("samples")
    if not isinstance(samples, int):
        samples = sum(len(r.samples) for r in run.rollouts) or None

    turns_p50, truncated, env_retries = _turn_figures(results)
    return Summary(
        total=int(s["total"]) if num(s.get("total")) is not None else len(run.rollouts),
        solved=int(s["solved"]) if num(s.get("solved")) is not None else outcomes["solved"],
        mean_reward=num(s.get("mean_reward"))
        if num(s.get("mean_reward")) is not None
        else (sum(rewards) / len(rewards) if rewards else None),
        failures=failures,
        samples=samples,
        tokens_trained=tokens,
        wall_s=num(s.get("wall_s")),
        timings=_timings(run),
        instances=len(by_instance),
        instances_solved=sum(by_instance.values()),
        groups=len(groups),
        groups_mixed=sum(1 for g in groups.values() if max(g) - min(g) > 1e-9),
        groups_all_zero=sum(1 for g in groups.values() if max(g) <= 0.0),
        outcomes=dict(outcomes),
        turns_p50=turns_p50,
        truncated=truncated,
        env_retries=env_retries,
    )
