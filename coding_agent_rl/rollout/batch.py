"""Many rollouts over a dataset, concurrently, with live progress and resumable output."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

from coding_agent_rl.rollout.executor import Executor, create_executor
from coding_agent_rl.rollout.outputs import RunWriter, rollout_key, summarize
from coding_agent_rl.rollout.runtime import RuntimeConfig
from coding_agent_rl.types import Sample

log = logging.getLogger(__name__)


def make_samples(rows: list[Any], n_samples: int) -> list[tuple[Any, Sample]]:
    """K rollouts per task form one GRPO group: same ``group_index``, distinct ``index``."""
    out = []
    for g, row in enumerate(rows):
        for k in range(n_samples):
            index = g * n_samples + k
            out.append(
                (
                    row,
                    Sample(
                        group_index=g,
                        index=index,
                        rollout_id=index,
                        prompt=row.prompt,
                        label=row.label,
                        metadata=dict(row.metadata),
                    ),
                )
            )
    return out


class Progress:
    """One live status line on a terminal; plain log lines otherwise."""

    def __init__(self, total: int, *, stream: Any = None):
        self.total = total
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.t0 = time.monotonic()
        self.results: list[dict[str, Any]] = []

    def update(self, record: dict[str, Any]) -> None:
        self.results.append(record)
        s = summarize(self.results)
        rate = len(self.results) / max(time.monotonic() - self.t0, 1e-9) * 60
        fails = " ".join(f"{k}={v}" for k, v in sorted(s["failures_by_kind"].items())) or "none"
        line = (
            f"[{len(self.results)}/{self.total}] solved {s['solved']} | failures {fails} | "
            f"{rate:.1f} rollouts/min"
        )
        if self.live:
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        else:
            log.info(
                "%s  (%s reward=%s kind=%s)",
                line,
                record["instance_id"],
                record.get("reward"),
                record.get("failure_kind"),
            )

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")


async def run_batch(
    rows: list[Any],
    config: RuntimeConfig,
    writer: RunWriter,
    *,
    concurrency: int | None = 4,
    n_samples: int = 1,
    info: dict[str, Any] | None = None,
    executor: Executor | str = "in-process",
) -> dict[str, Any]:
    """Run every (row, k) not yet in ``writer`` on ``executor`` (one, or its name in
    ``EXECUTORS``: built with ``concurrency``); returns the summary (also written to disk)."""
    todo = [
        (row, s)
        for row, s in make_samples(rows, n_samples)
        if rollout_key(row.instance_id, s.index) not in writer.done_keys()
    ]
    runner: Executor = (
        create_executor(executor, config, concurrency=concurrency)
        if isinstance(executor, str)
        else executor
    )
    t0 = time.monotonic()
    progress = Progress(len(todo))
    try:
        await runner.start()

        async def one(row: Any, sample: Sample) -> None:
            outcome = await runner.run(
                row, sample, sampling_params=config.sampling_defaults or None
            )
            outcome.record["agent"] = config.agent
            writer.add(outcome.samples, outcome.record)
            progress.update(outcome.record)

        await asyncio.gather(*(one(r, s) for r, s in todo))
    finally:
        progress.close()
        await runner.stop()
        stats = getattr(runner, "stats", None)  # a multi-node executor's per-node figures
        summary = summarize(
            writer.results,
            **(info or {}),
            **({"executor": stats()} if callable(stats) else {}),
            agent=config.agent,
            sandbox=config.rollout.backend,
            policy=config.policy or config.sglang_url,
            tokenizer=config.tokenizer,
            wall_s=round(time.monotonic() - t0, 2),
        )
        writer.close(summary)
    return summary
