"""``coding-agent-rl bench bookkeeping``: what a finished rollout costs the run's bookkeeping.

Ours (append-only files, running counters: O(1) per rollout) against a re-implementation of the
earlier per-record re-summary, at two run sizes. Method: docs/modules/bench.md.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import logging
import pathlib
import statistics
import tempfile
import time
from typing import Any

from coding_agent_rl.commands.bench import Target, add_check_argument, missed_targets, report
from coding_agent_rl.rollout.outputs import summarize

TARGETS: dict[str, Target] = {
    "ours_growth": ("<=", 1.5),  # per-rollout cost at N / at N/10: flat
    "speedup_at_records": (">=", 5.0),  # baseline / ours at N records
}

PHASES = ("sandbox_s", "install_s", "agent_s", "diff_s", "grade_s")


def synthetic_record(i: int) -> dict[str, Any]:
    """A results.jsonl line of the usual shape (values vary with ``i``)."""
    kinds = (None, None, None, "model", "infra", None, "model")
    kind = kinds[i % len(kinds)]
    timings = {p: round(1.0 + (i * 7 + j) % 13 / 3, 3) for j, p in enumerate(PHASES)}
    timings["total_s"] = round(sum(timings.values()), 3)
    return {
        "rollout_id": i,
        "instance_id": f"task-{i // 4}",
        "sample_index": i,
        "group_index": i // 4,
        "session_id": f"run-task-{i}-0-{i:032x}",
        "reward": 1.0 if kind is None and i % 2 == 0 else 0.0,
        "failure_kind": kind,
        "abort_reason": "SandboxError: engine busy" if kind == "infra" else None,
        "agent_exit_code": 0,
        "agent_timed_out": False,
        "isolation": {"agent_network": "adapter-only", "grading_network": "none", "limits": {}},
        "node": f"node-{i % 2}",
        "infra_stage": "sandbox" if kind == "infra" else None,
        "turns": 12 + i % 9,
        "num_segments": 0 if kind == "infra" else 1,
        "metrics": {"tokens_generated": 3000 + i % 500, "tokens_trained": 2800, "retries": 0},
        "timings": timings,
        "agent": "claude_code",
    }


def _sample(i: int) -> Any:
    from coding_agent_rl.types import Sample

    return Sample(
        index=i,
        tokens=list(range(64)),
        response_length=32,
        loss_mask=[1] * 32,
        rollout_log_probs=[-0.5] * 32,
        metadata={"instance_id": f"task-{i // 4}"},
    )


# ---- the baseline: the previous bookkeeping, re-implemented ---------------------------------
class OldWriter:
    """The old RunWriter.add: append the lines, keep every record, update metrics.prom."""

    def __init__(self, out: pathlib.Path):
        from coding_agent_rl.rollout.outputs import MetricTotals

        self.out = out
        self.results: list[dict[str, Any]] = []
        self.totals = MetricTotals()
        self._samples = (out / "samples.jsonl").open("a")
        self._results = (out / "results.jsonl").open("a")

    def add(self, samples: list[Any], record: dict[str, Any]) -> None:
        for s in samples:
            self._samples.write(json.dumps(s.to_dict()) + "\n")
        self._samples.flush()
        self._results.write(json.dumps(record, default=str) + "\n")
        self._results.flush()
        self.results.append(record)
        self.totals.add(record)
        self.totals.write(self.out / "metrics.prom")

    def close(self) -> None:
        self._samples.close()
        self._results.close()


class OldProgress:
    """The old Progress.update: every record so far summarised again for one status line."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self.line = ""

    def update(self, record: dict[str, Any]) -> None:
        self.results.append(record)
        s = summarize(self.results)  # the full pass a re-summarising progress line makes
        rate = len(self.results) / max(time.monotonic() - self.t0, 1e-9) * 60
        fails = " ".join(f"{k}={v}" for k, v in sorted(s["failures_by_kind"].items())) or "none"
        self.line = f"[{len(self.results)}] solved {s['solved']} | failures {fails} | {rate:.1f}"


# ---- measuring -----------------------------------------------------------------------------------
class _Run:
    """One way's bookkeeping with ``records`` already in the run (filled untimed)."""

    def __init__(self, way: str, records: int, measure: int, folder: pathlib.Path):
        from coding_agent_rl.rollout.batch import Progress
        from coding_agent_rl.rollout.outputs import RunWriter

        folder.mkdir(parents=True)
        self.way = way
        self.batch = [(synthetic_record(i), [_sample(i)]) for i in range(records + measure)]
        self.next = records
        self.took: list[float] = []
        if way == "ours":
            self.writer = RunWriter(folder)
            self.progress = Progress(records + measure, stream=io.StringIO())
            for record, samples in self.batch[:records]:
                self.writer.add(samples, dict(record))
                self.progress.update(record)
        else:
            self.old = OldWriter(folder)
            self.old_progress = OldProgress()
            for record, samples in self.batch[:records]:  # no summaries: not what is measured
                self.old.add(samples, dict(record))
                self.old_progress.results.append(record)

    def step(self) -> None:
        """One more finished rollout, timed."""
        record, samples = self.batch[self.next]
        self.next += 1
        t0 = time.perf_counter()
        if self.way == "ours":
            self.writer.add(samples, dict(record))
            self.progress.update(record)
        else:
            self.old.add(samples, dict(record))
            self.old_progress.update(record)
        self.took.append(time.perf_counter() - t0)

    def close(self) -> None:
        if self.way == "ours":
            self.writer.close(self.writer.summary())
        else:
            self.old.close()

    def median_ms(self) -> float:
        return statistics.median(self.took) * 1000


def per_rollout_ms(
    way: str, sizes: tuple[int, ...], measure: int, folder: pathlib.Path
) -> dict[int, float]:
    """Median ms per finished rollout at each size in ``sizes`` (records already in the run).
    The sizes take turns, one rollout each, so a shared machine's load drift hits them alike."""
    runs = {n: _Run(way, n, measure, folder / f"{way}-{n}") for n in sizes}
    gc.collect()
    for _ in range(measure):
        for run in runs.values():
            run.step()
    for run in runs.values():
        run.close()
    return {n: run.median_ms() for n, run in runs.items()}


def _final_summary_ms(records: int) -> float:
    batch = [synthetic_record(i) for i in range(records)]
    t0 = time.perf_counter()
    summarize(batch)
    return (time.perf_counter() - t0) * 1000


def measure(records: int, measure_n: int) -> dict[str, Any]:
    small = max(1, records // 10)
    logging.getLogger("coding_agent_rl.rollout.batch").setLevel(logging.WARNING)  # no log lines
    ms: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-bookkeeping-") as tmp:
        for way in ("ours", "baseline"):
            for n, value in per_rollout_ms(
                way, (small, records), measure_n, pathlib.Path(tmp)
            ).items():
                ms[(way, n)] = round(value, 3)
    result: dict[str, Any] = {
        "bench": "bookkeeping",
        "records": records,
        "measured_rollouts": measure_n,
        "ours_ms_per_rollout": {f"at_{n}": ms[("ours", n)] for n in (small, records)},
        "baseline_ms_per_rollout": {f"at_{n}": ms[("baseline", n)] for n in (small, records)},
        "ours_growth": round(ms[("ours", records)] / ms[("ours", small)], 2),
        "baseline_growth": round(ms[("baseline", records)] / ms[("baseline", small)], 2),
        "speedup_at_records": round(ms[("baseline", records)] / ms[("ours", records)], 1),
        "final_summary_ms": round(_final_summary_ms(records), 1),
        "baseline": {
            "kind": "run",
            "from": "the previous RunWriter.add + Progress.update (re-summarising every record), "
            "re-implemented in this module, same records, same process, one after the other",
        },
        "targets": {k: f"{op} {bound:g}" for k, (op, bound) in TARGETS.items()},
    }
    result["targets_missed"] = missed_targets(result, TARGETS)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=10000, help="records in the run (N)")
    parser.add_argument(
        "--measure", type=int, default=200, help="rollouts timed at each size (median)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError

    if args.records < 10 or args.measure < 1:
        raise UserError("--records >= 10 and --measure >= 1")
    return report("bookkeeping", measure(args.records, args.measure), args)
