"""The compact per-rollout JSON the page expands lazily.

Token streams stay integer arrays; the loss mask becomes run-length spans of trained tokens
(absolute positions in ``tokens``) and the log probs keep only the trained tokens' values, in
order, so a 30k-token sample costs about as many bytes as its ids. Key names are short on
purpose (they repeat once per sample): see ``sample_payload``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from coding_agent_rl.report.load import ARTIFACT_NAMES, Rollout, read_artifact

LOGPROB_DIGITS = 4
# Metadata keys shown as the sample's own fields, or too bulky for the key/value list.
_META_SHOWN = {"segment", "segment_index", "num_segments", "turns", "abort_reason", "instance_id"}


def _finite(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def mask_spans(mask: list[int], offset: int) -> tuple[list[list[int]], list[int]]:
    """Runs of 1s in ``mask`` as ``[start + offset, length]``, and the positions (in ``mask``)."""
    spans: list[list[int]] = []
    where: list[int] = []
    for i, m in enumerate(mask):
        if not m:
            continue
        where.append(i)
        if spans and spans[-1][0] + spans[-1][1] == i + offset:
            spans[-1][1] += 1
        else:
            spans.append([i + offset, 1])
    return spans, where


def _scalar_meta(meta: dict[str, Any]) -> list[list[Any]]:
    out = []
    for k, v in meta.items():
        if k in _META_SHOWN or isinstance(v, (dict, list)):
            continue
        out.append([k, v if isinstance(v, (int, float, bool)) or v is None else str(v)[:500]])
    return out


TURN_TEXT_CHARS = 2000  # of each action / observation preview embedded per turn


def turns_payload(turns: Any) -> list[dict[str, Any]] | None:
    """A native sample's ``metadata.turns`` (one dict per turn) for the turns table: ``i`` index,
    ``a`` action, ``o`` observation, ``s`` sampled / ``ot`` observation tokens, ``f`` finish,
    ``g`` / ``e`` generate / env seconds, ``r`` retries (``rt`` by type), ``d`` done."""
    if not isinstance(turns, list):
        return None
    out = []
    for t in turns:
        if not isinstance(t, dict):
            continue
        retry_types: dict[str, Any] = (
            t["retry_types"] if isinstance(t.get("retry_types"), dict) else {}
        )
        out.append(
            {
                "i": t.get("index"),
                "a": str(t.get("action") or "")[:TURN_TEXT_CHARS],
                "o": str(t.get("observation") or "")[:TURN_TEXT_CHARS],
                "s": t.get("sampled"),
                "ot": t.get("observation_tokens"),
                "f": t.get("finish"),
                "g": _finite(t.get("generate_s")),
                "e": _finite(t.get("env_s")),
                "r": t.get("retries") or 0,
                "rt": ", ".join(f"{k} x{v}" for k, v in retry_types.items()),
                "d": bool(t.get("done")),
            }
        )
    return out


def sample_payload(sample: dict[str, Any]) -> dict[str, Any]:
    """One sample: ``t`` ids, ``p`` prompt length, ``m`` trained spans, ``lp`` trained logprobs,
    ``nt`` trained count, ``mlp`` their mean, ``seg``/``si``/``ns`` segment label, index, count,
    ``tl`` the per-turn list of a native sample (:func:`turns_payload`)."""
    meta = sample.get("metadata") or {}
    reward = sample.get("reward")
    turns = meta.get("turns")
    out: dict[str, Any] = {
        "seg": meta.get("segment"),
        "si": meta.get("segment_index"),
        "ns": meta.get("num_segments"),
        "status": sample.get("status"),
        "reward": reward if isinstance(reward, dict) else _finite(reward),
        "turns": len(turns) if isinstance(turns, list) else turns,
        "tl": turns_payload(turns),
        "remove": bool(sample.get("remove_sample")),
        "abort": meta.get("abort_reason"),
        "index": sample.get("index"),
        "meta": _scalar_meta(meta),
        "warn": [],
    }
    tokens = sample.get("tokens")
    if tokens is None:  # light sample: detail not embedded
        out.update(t=None, nt=sample.get("trained_tokens", 0), rl=sample.get("response_length"))
        return out
    rl = int(sample.get("response_length") or 0)
    mask = list(sample.get("loss_mask") or [])
    lps = list(sample.get("rollout_log_probs") or [])
    if rl > len(tokens):
        out["warn"].append(f"response_length {rl} exceeds {len(tokens)} tokens")
        rl = len(tokens)
    if not (len(mask) == len(lps) == rl):
        out["warn"].append(
            f"misaligned: loss_mask={len(mask)} rollout_log_probs={len(lps)} response_length={rl}"
        )
    prompt_len = len(tokens) - rl
    spans, where = mask_spans(mask[:rl], prompt_len)
    try:  # the common case, fast; NaN/inf survive here and become null in ``script_json``
        trained_lps: list[float | None] = [round(float(lps[i]), LOGPROB_DIGITS) for i in where]
    except (TypeError, ValueError, IndexError):
        trained_lps = [
            None
            if (v := _finite(lps[i] if i < len(lps) else None)) is None
            else round(v, LOGPROB_DIGITS)
            for i in where
        ]
    present = [v for v in trained_lps if v is not None and math.isfinite(v)]
    out.update(
        t=tokens,
        p=prompt_len,
        rl=rl,
        m=spans,
        lp=trained_lps,
        nt=len(where),
        mlp=round(sum(present) / len(present), LOGPROB_DIGITS) if present else None,
    )
    return out


def _artifact_payload(run_dir: Path, rel: Any) -> dict[str, Any] | None:
    if not isinstance(rel, str) or not rel:
        return None
    art = read_artifact(run_dir, rel)
    return {"path": art.path, "text": art.text, "omitted": art.omitted_bytes, "error": art.error}


def _tests(result: dict[str, Any]) -> list[list[str]]:
    tests = result.get("tests") or {}
    if not isinstance(tests, dict):
        return []
    # Failures first: they are what one opens a rollout for.
    order = {"FAILED": 0, "ERROR": 1}
    items = [[str(k), str(v)] for k, v in tests.items()]
    return sorted(items, key=lambda kv: (order.get(kv[1].upper(), 2), kv[0]))


def rollout_payload(rollout: Rollout, run_dir: Path, facts: list[list[Any]]) -> dict[str, Any]:
    """Everything the expanded row shows; artifacts are read only for rollouts with detail."""
    result = rollout.result
    artifacts: dict[str, Any] = (
        result["artifacts"] if isinstance(result.get("artifacts"), dict) else {}
    )
    out: dict[str, Any] = {
        "key": rollout.key,
        "detail": rollout.has_detail,
        "facts": facts,
        "tests": _tests(result),
        "samples": [sample_payload(s) for s in rollout.samples],
    }
    for name in ARTIFACT_NAMES:
        out[name] = _artifact_payload(run_dir, artifacts.get(name)) if rollout.has_detail else None
    return out


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def script_json(obj: Any) -> str:
    """JSON safe to place inside ``<script type="application/json">``: no ``</script>``, no
    ``<!--``, no raw U+2028/2029 (``<``, ``>``, ``&`` become ``\\u003c`` etc.; JSON.parse undoes it)."""
    try:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN/inf somewhere (JSON.parse rejects them): the slow, cleaning path
        text = json.dumps(_clean(obj), ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )
