"""Read a run directory written by ``coding-agent-rl run`` into one :class:`RunData`.

Tolerant by design: a run still in progress (or killed) can end in a half-written line, and any
file may be missing. Problems are collected in ``RunData.warnings`` and shown in the report,
never raised. Only the first ``max_detail`` rollouts keep their full samples (token arrays);
the rest keep a light per-sample summary, so memory stays bounded on large runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SUMMARY_FILE = "summary.json"
RESULTS_FILE = "results.jsonl"
SAMPLES_FILE = "samples.jsonl"
ARTIFACT_NAMES = ("diff", "agent_log", "test_log")
# Artifacts are read up to this many bytes: the head and the tail (where a crash or the test
# summary is), with a marker in between.
ARTIFACT_CAP_BYTES = 256 * 1024


@dataclasses.dataclass
class Artifact:
    path: str
    text: str | None = None  # None: unreadable / missing (see ``error``)
    omitted_bytes: int = 0
    error: str | None = None


@dataclasses.dataclass
class Rollout:
    key: str  # stable DOM-safe key: "r<position>"
    result: dict[str, Any]  # the results.jsonl line (synthesised from samples when absent)
    samples: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    has_detail: bool = False  # samples hold full token arrays

    @property
    def rollout_id(self) -> str:
        return _id_key(self.result.get("rollout_id"))


@dataclasses.dataclass
class RunData:
    run_dir: Path
    summary: dict[str, Any]  # summary.json as written (possibly empty)
    rollouts: list[Rollout]
    warnings: list[str]


def _id_key(value: Any) -> str:
    return "" if value is None else str(value)


def _read_jsonl(path: Path, warnings: list[str]) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        warnings.append(f"{path.name} is missing")
        return
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                warnings.append(f"{path.name} line {lineno}: not JSON ({e.msg}); skipped")
                continue
            if isinstance(obj, dict):
                yield obj
            else:
                warnings.append(f"{path.name} line {lineno}: not an object; skipped")


def _read_summary(run_dir: Path, warnings: list[str]) -> dict[str, Any]:
    path = run_dir / SUMMARY_FILE
    if not path.is_file():
        warnings.append(f"{SUMMARY_FILE} is missing; figures are computed from {RESULTS_FILE}")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        warnings.append(f"{SUMMARY_FILE}: not JSON ({e.msg})")
        return {}
    return data if isinstance(data, dict) else {}


def _drop_media(sample: dict[str, Any]) -> None:
    """The report shows how many images a sample holds, not their bytes or tensors."""
    sample.pop("multimodal_train_inputs", None)
    images = (sample.get("multimodal_inputs") or {}).get("images")
    if images is not None:
        sample["multimodal_inputs"] = {"images": len(images)}


def _light(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample without its token arrays (for rollouts whose detail is not embedded)."""
    mask = sample.get("loss_mask") or []
    light = {
        k: v for k, v in sample.items() if k not in ("tokens", "loss_mask", "rollout_log_probs")
    }
    light["response"] = ""
    light["prompt"] = ""
    light["trained_tokens"] = sum(1 for m in mask if m)
    return light


def _sample_order(sample: dict[str, Any]) -> int:
    seg_index = (sample.get("metadata") or {}).get("segment_index")
    return seg_index if isinstance(seg_index, int) else 1 << 30  # unlabelled: last, file order


def load_run(run_dir: str | Path, *, max_detail: int | None = None) -> RunData:
    """Read ``run_dir``; full samples are kept for the first ``max_detail`` rollouts (None: all)."""
    root = Path(run_dir)
    warnings: list[str] = []
    summary = _read_summary(root, warnings)
    results = list(_read_jsonl(root / RESULTS_FILE, warnings))

    rollouts: list[Rollout] = []
    by_id: dict[str, Rollout] = {}
    for result in results:
        rollout = Rollout(key=f"r{len(rollouts)}", result=result)
        rid = rollout.rollout_id
        if rid and rid in by_id:
            # A later attempt (``run --resume`` re-ran an infrastructure failure) is expected.
            if (result.get("attempt") or 0) <= (by_id[rid].result.get("attempt") or 0):
                warnings.append(f"{RESULTS_FILE}: rollout_id {rid} appears twice; last line kept")
            by_id[rid].result = result
            continue
        rollouts.append(rollout)
        if rid:
            by_id[rid] = rollout

    def wants_detail(r: Rollout) -> bool:
        return max_detail is None or int(r.key[1:]) < max_detail

    orphans = 0
    for sample in _read_jsonl(root / SAMPLES_FILE, warnings):
        _drop_media(sample)
        rid = _id_key(sample.get("rollout_id"))
        found = by_id.get(rid) if rid else None
        if found is None:
            # A sample whose rollout has no results line (e.g. the run was killed between the
            # two writes): show it under a synthesised rollout rather than hide it.
            orphans += 1
            meta = sample.get("metadata") or {}
            rollout = Rollout(
                key=f"r{len(rollouts)}",
                result={
                    "rollout_id": sample.get("rollout_id"),
                    "instance_id": meta.get("instance_id"),
                    "sample_index": sample.get("index"),
                    "group_index": sample.get("group_index"),
                    "reward": sample.get("reward")
                    if not isinstance(sample.get("reward"), dict)
                    else None,
                    "failure_kind": meta.get("failure_kind"),
                    "abort_reason": meta.get("abort_reason"),
                    "_synthesised": True,
                },
            )
            rollouts.append(rollout)
            by_id[rid or rollout.key] = rollout
        else:
            rollout = found
        rollout.has_detail = wants_detail(rollout)
        rollout.samples.append(sample if rollout.has_detail else _light(sample))
    if orphans:
        warnings.append(f"{orphans} sample(s) have no line in {RESULTS_FILE}; rows synthesised")

    for rollout in rollouts:
        rollout.samples.sort(key=_sample_order)  # stable: file order within equal keys
        if not rollout.samples:
            rollout.has_detail = wants_detail(rollout)
    return RunData(run_dir=root, summary=summary, rollouts=rollouts, warnings=warnings)


def read_artifact(run_dir: Path, rel: str, cap: int = ARTIFACT_CAP_BYTES) -> Artifact:
    """Read an artifact named relative to ``run_dir``: head + tail when over ``cap`` bytes."""
    art = Artifact(path=rel)
    root = run_dir.resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        art.error = "path leaves the run directory; not read"
        return art
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size <= cap:
                data = f.read()
            else:
                head = f.read(cap // 4)
                f.seek(size - (cap - cap // 4))
                tail = f.read()
                art.omitted_bytes = size - len(head) - len(tail)
                marker = f"\n[... {art.omitted_bytes:,} bytes omitted ...]\n".encode()
                data = head + marker + tail
    except FileNotFoundError:
        art.error = "missing"
        return art
    except OSError as e:
        art.error = f"unreadable: {e.strerror or e}"
        return art
    art.text = data.decode("utf-8", errors="replace")
    return art
