"""Many rollouts over a dataset, concurrently, with live progress and resumable output."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import Counter
from typing import Any

from coding_agent_rl.rollout.executor import Executor, create_executor
from coding_agent_rl.rollout.outputs import RunWriter, rollout_key
from coding_agent_rl.rollout.runtime import RuntimeConfig
from coding_agent_rl.sandbox import admission
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
    """One live status line on a terminal; plain log lines otherwise. O(1) per rollout:
    running counters (solved, failures by kind, rollouts per node), never a pass over records."""

    def __init__(self, total: int, *, stream: Any = None):
        self.total = total
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.t0 = time.monotonic()
        self.done = 0
        self.solved = 0
        self.failures: Counter[str] = Counter()
        self.nodes: Counter[str] = Counter()
        self._sandboxes_before = admission.snapshot()  # the line counts this run's

    def line(self) -> str:
        rate = self.done / max(time.monotonic() - self.t0, 1e-9) * 60
        fails = " ".join(f"{k}={v}" for k, v in sorted(self.failures.items())) or "none"
        line = (
            f"[{self.done}/{self.total}] solved {self.solved} | failures {fails} | "
            f"{rate:.1f} rollouts/min"
        )
        if len(self.nodes) > 1:
            line += " | " + " ".join(f"{n}={c}" for n, c in sorted(self.nodes.items()))
        if sandboxes := admission.progress_text(self._sandboxes_before):
            line += " | " + sandboxes
        return line

    def update(self, record: dict[str, Any]) -> None:
        self.done += 1
        self.solved += (record.get("reward") or 0) >= 1.0
        if record.get("failure_kind"):
            self.failures[record["failure_kind"]] += 1
        self.nodes[record.get("node") or "?"] += 1
        line = self.line()
        if self.live:
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        else:
            log.info(
                "%s  (%s reward=%s kind=%s node=%s)",
                line,
                record["instance_id"],
                record.get("reward"),
                record.get("failure_kind"),
                record.get("node"),
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
    done = writer.done_keys()
    todo = [
        (row, s)
        for row, s in make_samples(rows, n_samples)
        if rollout_key(row.instance_id, s.index) not in done
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
        expect = getattr(runner, "expect", None)  # a pool prepares for the rows coming next
        if callable(expect):
            expect([row for row, _ in todo])

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
        summary = writer.summary(
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
