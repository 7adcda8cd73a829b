"""A run's output folder: ``samples.jsonl``, ``results.jsonl``, ``summary.json``, artifacts.

Append-only files and in-memory indexes (O(1) per finished rollout); every attempt appends its
record and a rollout's latest counts; ``--resume`` re-runs infrastructure failures up to
``resume_attempts``. Details: docs/modules/rollout.md.
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import time
from collections import Counter
from collections.abc import Iterable
from typing import IO, Any

import prometheus_client as prom

from coding_agent_rl.grading.result import tamper_kind
from coding_agent_rl.rollout.timing import PHASES
from coding_agent_rl.sandbox import admission
from coding_agent_rl.sandbox.base import TEARDOWN_FAILURES
from coding_agent_rl.types import Sample


def rollout_key(instance_id: str, sample_index: int | None) -> str:
    return f"{instance_id}#{sample_index}"


def record_key(record: dict[str, Any]) -> str:
    return rollout_key(record.get("instance_id", ""), record.get("sample_index"))


class RunWriter:
    """``resume``: keep and index earlier results (``resume_attempts``: records a rollout may
    have before an infrastructure failure is final); ``append``: keep earlier lines but hold
    nothing in memory (``results`` stays empty) and no open file between writes (a trainer's
    writer lives as long as its process and is never closed); ``samples=False``: no
    samples.jsonl."""

    def __init__(
        self,
        out: pathlib.Path,
        *,
        resume: bool = False,
        append: bool = False,
        samples: bool = True,
        resume_attempts: int = 1,
    ):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.samples_path = out / "samples.jsonl"
        self.results_path = out / "results.jsonl"
        self.resume_attempts = max(1, resume_attempts)
        self._keep = not append
        self._latest: dict[str, dict[str, Any]] = {}  # rollout key -> its latest record
        self._attempts: Counter[str] = Counter()  # rollout key -> records so far
        self._done: set[str] = set()  # rollouts a run must not start again
        self.totals = MetricTotals()
        if resume:
            for record in read_jsonl(self.results_path):
                self._index(record)
                self.totals.add(record)
            if samples:
                self._drop_unfinished_samples()
        elif not append:
            for p in (self.samples_path, self.results_path):
                p.unlink(missing_ok=True)
        for path in (self.samples_path, self.results_path):
            _end_line(path)
        self._has_samples = samples
        self._samples = self.samples_path.open("a") if samples and not append else None
        self._results = self.results_path.open("a") if not append else None

    @property
    def results(self) -> list[dict[str, Any]]:
        """The latest record of every rollout (one per rollout)."""
        return list(self._latest.values())

    def done_keys(self) -> set[str]:
        """Rollouts not to run again: their latest record is final (graded, a model or data
        failure, aborted), or an infrastructure failure that used up ``resume_attempts``."""
        return self._done

    def attempts(self, key: str) -> int:
        """Records of rollout ``key`` so far."""
        return self._attempts[key]

    def _index(self, record: dict[str, Any]) -> None:
        if not self._keep:
            return
        key = record_key(record)
        self._latest[key] = record
        self._attempts[key] += 1
        if record.get("failure_kind") != "infra" or self._attempts[key] >= self.resume_attempts:
            self._done.add(key)
        else:
            self._done.discard(key)

    def _drop_unfinished_samples(self) -> None:
        """One pass at resume: keep the sample lines of rollouts with a non-infra latest
        record (written before their record, so a kill in between left them alone)."""
        if not self.samples_path.exists():
            return
        finished = {k for k, r in self._latest.items() if r.get("failure_kind") != "infra"}
        tmp = self.samples_path.with_suffix(".jsonl.tmp")
        dropped = 0
        with self.samples_path.open() as src, tmp.open("w") as dst:
            for line in src:
                try:
                    d = json.loads(line)
                    key = rollout_key(
                        str((d.get("metadata") or {}).get("instance_id")), d.get("index")
                    )
                except (json.JSONDecodeError, AttributeError):
                    key = None
                if key in finished:
                    dst.write(line if line.endswith("\n") else line + "\n")
                else:
                    dropped += 1
        if dropped:
            os.replace(tmp, self.samples_path)
        else:
            tmp.unlink()

    def add(self, samples: list[Sample], record: dict[str, Any]) -> None:
        if self._keep:
            record.setdefault("attempt", self._attempts[record_key(record)] + 1)
        if self._has_samples and record.get("failure_kind") != "infra":
            lines = "".join(json.dumps(s.to_dict()) + "\n" for s in samples)
            _write(self._samples, self.samples_path, lines)
        _write(self._results, self.results_path, json.dumps(record, default=str) + "\n")
        self._index(record)
        self.totals.add(record)
        self.totals.write(self.out / "metrics.prom")

    def summary(self, **info: Any) -> dict[str, Any]:
        """:func:`summarize` over the latest record of each rollout (one pass)."""
        return summarize(self._latest.values(), **info)

    def close(self, summary: dict[str, Any]) -> None:
        if self._samples is not None:
            self._samples.close()
        if self._results is not None:
            self._results.close()
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def _write(handle: IO[str] | None, path: pathlib.Path, text: str) -> None:
    """Append ``text`` through ``handle`` (or a file opened for it) whole or not at all: a write
    that fails part-way (ENOSPC) is cut back to where it began, so no torn line stays behind."""
    if handle is not None:
        handle.flush()
        _append_whole(handle.fileno(), text.encode())
        return
    with path.open("ab") as f:
        _append_whole(f.fileno(), text.encode())


def _append_whole(fd: int, data: bytes) -> None:
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        os.ftruncate(fd, start)
        raise


def _end_line(path: pathlib.Path) -> None:
    """A line cut by a kill mid-write gets its end, so the next line appended stays whole."""
    try:
        with path.open("rb+") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
    except FileNotFoundError:
        pass


class MetricTotals:
    """Running totals behind metrics.prom (Prometheus text format, for long runs:
    node_exporter's textfile collector reads the file; replaced atomically after every rollout).
    Exposition by ``prometheus_client`` (one registry per run, nothing global)."""

    COUNTERS = ("tokens_generated", "tokens_trained", "retries")

    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self.outcomes = prom.Counter(
            "coding_agent_rl_rollouts", "rollouts by outcome", ["outcome"], registry=r
        )
        self.reward = prom.Summary("coding_agent_rl_reward", "rollout rewards", registry=r)
        self.counters = {
            name: prom.Counter(f"coding_agent_rl_{name}", name.replace("_", " "), registry=r)
            for name in self.COUNTERS
        }
        self.phases = prom.Summary(
            "coding_agent_rl_phase_seconds", "time per rollout phase", ["phase"], registry=r
        )
        self.tampering = prom.Counter(
            "coding_agent_rl_tampering",
            "rollouts with tampering evidence, by the layer that found it",
            ["kind"],
            registry=r,
        )
        self.teardown_failures = prom.Counter(
            "coding_agent_rl_sandbox_teardown_failures",
            "sandboxes whose destroy failed (each logged with its id): possible leaks",
            ["backend"],
            registry=r,
        )
        self.step_failures = prom.Counter(
            "coding_agent_rl_teardown_failures",
            "rollout teardown steps that failed (each logged; the others still ran), by step",
            ["step"],
            registry=r,
        )
        self.grader_errors = prom.Counter(
            "coding_agent_rl_grader_errors",
            "rollouts whose input made the grader raise (scored as the model's), by stage",
            ["stage"],
            registry=r,
        )
        self._teardowns_seen: Counter[str] = Counter(TEARDOWN_FAILURES)  # before this run
        # Sandbox admission and the pool (sandbox/admission.py), this process's, per backend.
        self.sandboxes = prom.Gauge(
            "coding_agent_rl_sandboxes",
            "sandbox creation and pool figures since the run began (pool_size, in_flight: now; "
            "start_p50_s / start_p99_s: the latest creations' start latency)",
            ["backend", "figure"],
            registry=r,
        )
        self._admission_seen = admission.snapshot()  # before this run

    def add(self, record: dict[str, Any]) -> None:
        reward = record.get("reward") or 0
        self.outcomes.labels(
            record.get("failure_kind") or ("solved" if reward >= 1.0 else "unsolved")
        ).inc()
        self.reward.observe(reward)
        if isinstance(error := record.get("grader_error"), dict):
            self.grader_errors.labels(str(error.get("stage"))[:40]).inc()
        metrics = record.get("metrics") or {}
        for name in self.COUNTERS:
            self.counters[name].inc(metrics.get(name) or 0)
        for kind in sorted({tamper_kind(str(t)) for t in record.get("tampering") or []}):
            self.tampering.labels(kind).inc()
        for step in record.get("teardown_failures") or []:
            self.step_failures.labels(str(step)[:40]).inc()
        for k, v in (record.get("timings") or {}).items():
            self.phases.labels(k.removesuffix("_s")).observe(v)
        for backend, n in TEARDOWN_FAILURES.items():  # this process's, since the run began
            if n > self._teardowns_seen[backend]:
                self.teardown_failures.labels(backend).inc(n - self._teardowns_seen[backend])
                self._teardowns_seen[backend] = n

        for backend, figures in admission.snapshot().items():
            before = self._admission_seen.get(backend, {})
            for name, value in figures.items():
                if value is None:
                    continue
                if name in admission.CUMULATIVE:
                    value -= before.get(name) or 0
                self.sandboxes.labels(backend, name).set(value)

    def write(self, path: pathlib.Path) -> None:
        prom.write_to_textfile(str(path), self.registry)


def read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash mid-write: that rollout reruns on --resume
    return out


def summarize(records: Iterable[dict[str, Any]], **info: Any) -> dict[str, Any]:
    """Aggregate figures over ``results.jsonl`` records, one per rollout (its latest).

    ``mean_reward`` is over the *graded* rollouts only (``None`` when there are none): an
    infrastructure failure is not a reward of 0. ``infra_failures`` counts those separately,
    ``infra_by_stage`` by the component that failed, and ``first_infra_reason`` shows the first.
    ``grader_errors`` counts rollouts whose input made the grader raise (scored as the model's,
    see grading/grade.py), ``grader_errors_by_stage`` by grading stage.
    """
    results = list(records)
    total = len(results)
    solved = sum(1 for r in results if (r.get("reward") or 0) >= 1.0)
    kinds = Counter(r["failure_kind"] for r in results if r.get("failure_kind"))
    infra = [r for r in results if r.get("failure_kind") == "infra"]
    graded = [r for r in results if r.get("failure_kind") != "infra"]
    p50: dict[str, float] = {}
    for phase in (*PHASES, "total_s"):
        vals = [r["timings"][phase] for r in results if phase in (r.get("timings") or {})]
        if vals:
            p50[phase] = round(statistics.median(vals), 3)
    metrics = [r.get("metrics") or {} for r in results]
    return {
        **info,
        "total": total,
        "solved": solved,
        "graded": len(graded),
        "mean_reward": round(sum(r.get("reward") or 0 for r in graded) / len(graded), 4)
        if graded
        else None,
        "infra_failures": len(infra),
        "infra_by_stage": dict(Counter(r.get("infra_stage") or "unknown" for r in infra)),
        "first_infra_reason": infra[0].get("abort_reason") if infra else None,
        "tampering": sum(1 for r in results if r.get("tampering")),
        "grader_errors": sum(1 for r in results if r.get("grader_error")),
        "grader_errors_by_stage": dict(
            Counter(
                str(e.get("stage")) for r in results if isinstance(e := r.get("grader_error"), dict)
            )
        ),
        "tampering_by_kind": dict(
            Counter(k for r in results for k in {tamper_kind(t) for t in r.get("tampering") or []})
        ),
        "rollouts_by_node": dict(Counter(r["node"] for r in results if r.get("node"))),
        "failures_by_kind": dict(kinds),
        "timings_p50": p50,
        "samples": sum(r.get("num_segments") or 0 for r in results),
        "tokens_generated": sum(m.get("tokens_generated") or 0 for m in metrics),
        "tokens_trained": sum(m.get("tokens_trained") or 0 for m in metrics),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
