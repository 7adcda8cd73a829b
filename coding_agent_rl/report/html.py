"""Render a run directory to one self-contained HTML file (inline CSS/JS, no external URL).

The summary and the rollout table are plain server-rendered HTML (autoescaped by Jinja); each
rollout's detail (samples' token streams, diff, tests, logs) travels as a JSON block that the
page turns into DOM only when the row is expanded, so large runs open fast.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from pathlib import Path
from typing import Any

import jinja2

from coding_agent_rl.report.load import RunData, load_run
from coding_agent_rl.report.payload import rollout_payload, script_json
from coding_agent_rl.report.stats import PHASES, Summary, num, outcome, summarize, trained_tokens
from coding_agent_rl.report.tokens import TokenTable, build_token_table
from coding_agent_rl.report.trees import tree_rows

DEFAULT_MAX_ROLLOUTS = 200
NONE = "\u2013"  # an en dash: "no value" in the table
OUTCOME_LABELS = {
    "solved": "solved",
    "unsolved": "unsolved",
    "model": "model failure",
    "infra": "infra failure",
    "unknown": "no reward",
}


def fmt_s(x: Any) -> str:
    v = num(x)
    if v is None:
        return NONE
    if v < 10:
        return f"{v:.2f} s"
    if v < 120:
        return f"{v:.1f} s"
    m, s = divmod(round(v), 60)
    return f"{m // 60} h {m % 60:02d} m" if m >= 60 else f"{m} m {s:02d} s"


def fmt_n(x: Any) -> str:
    n = num(x)
    return NONE if n is None else f"{int(n):,}"


def fmt_reward(x: Any) -> str:
    v = num(x)
    return NONE if v is None else f"{v:.3g}"


def _ratio(passed: Any, total: Any) -> tuple[str, float]:
    """``("3/4", 0.75)``; no tests (``0/0``) sorts below any real fraction, unknown lowest."""
    p, t = num(passed), num(total)
    if p is None or t is None:
        return NONE, -1.0
    return f"{int(p)}/{int(t)}", (p / t if t else -0.5)


@dataclasses.dataclass
class Row:
    key: str
    instance: str
    sample: str
    group: str
    reward: float | None
    f2p: tuple[str, float]
    p2p: tuple[str, float]
    segments: int | None
    turns: int | None
    tokens_trained: int | None
    total_s: float | None
    bars: list[tuple[str, float]]  # (phase, % of the slowest rollout's total)
    outcome: str
    reason: str


def _row(rollout: Any, max_total: float) -> Row:
    r = rollout.result
    timings = r.get("timings") if isinstance(r.get("timings"), dict) else {}
    total = num(timings.get("total_s"))
    bars = []
    if max_total > 0:
        for phase in PHASES:
            v = num(timings.get(phase))
            if v:
                bars.append((phase, 100.0 * v / max_total))
    metrics = r.get("metrics") if isinstance(r.get("metrics"), dict) else {}
    reason = r.get("abort_reason") or r.get("fail_reason") or ""
    exit_code = r.get("agent_exit_code")
    if not reason and isinstance(exit_code, int) and exit_code != 0:
        reason = f"agent exit code {exit_code}"
    notes = [reason] if reason else []
    if metrics.get("truncation_reason"):
        notes.append(f"truncated: {metrics['truncation_reason']}")
    if num(metrics.get("env_retries")):
        notes.append(f"{int(metrics['env_retries'])} env retries")
    reason = " · ".join(notes)
    segments = r.get("num_segments")
    return Row(
        key=rollout.key,
        instance=str(r.get("instance_id") or "?"),
        sample=str(r.get("sample_index") if r.get("sample_index") is not None else NONE),
        group=str(r.get("group_index") if r.get("group_index") is not None else NONE),
        reward=num(r.get("reward")),
        f2p=_ratio(r.get("f2p_passed"), r.get("f2p_total")),
        p2p=_ratio(r.get("p2p_passed"), r.get("p2p_total")),
        segments=segments if isinstance(segments, int) else (len(rollout.samples) or None),
        turns=r.get("turns") if isinstance(r.get("turns"), int) else None,
        tokens_trained=trained_tokens(rollout),
        total_s=total,
        bars=bars,
        outcome=outcome(r),
        reason=str(reason),
    )


_FACTS_SHOWN = {
    "rollout_id", "instance_id", "sample_index", "group_index", "agent", "agent_exit_code",
    "failure_kind", "abort_reason", "reward", "f2p_passed", "f2p_total", "p2p_passed",
    "p2p_total", "num_segments", "turns", "_synthesised",
}  # fmt: skip


def _facts(r: dict[str, Any]) -> list[list[Any]]:
    """Key/value lines for the expanded rollout (already formatted for display)."""
    facts: list[list[Any]] = []
    for key in ("rollout_id", "instance_id", "sample_index", "group_index", "agent"):
        if r.get(key) is not None:
            facts.append([key, str(r[key])])
    for key in ("agent_exit_code", "failure_kind", "abort_reason"):
        facts.append([key, NONE if r.get(key) is None else str(r[key])])
    for key, value in r.items():  # anything else the run recorded (fail_reason, apply_method, ...)
        if key not in _FACTS_SHOWN and not isinstance(value, (dict, list)) and value is not None:
            facts.append([key, str(value)[:2000]])
    if r.get("protected_paths_touched"):
        facts.append(["protected_paths_touched", ", ".join(map(str, r["protected_paths_touched"]))])
    for group in ("metrics", "timings"):
        if isinstance(r.get(group), dict):
            for k, v in r[group].items():
                shown = fmt_s(v) if group == "timings" else (NONE if v is None else str(v))
                facts.append([f"{group}.{k}", shown])
    if r.get("_synthesised"):
        facts.append(["note", "no results.jsonl line: built from its samples"])
    return facts


def _chart(summary: Summary) -> dict[str, Any]:
    """Geometry of the timing chart (bars scaled to the largest p90/p50 phase)."""
    phases = [t for t in summary.timings if t.phase != "total_s"]
    top = max([t.p90 or t.p50 or 0.0 for t in phases] + [1e-9])
    rows: list[dict[str, Any]] = [
        {
            "label": t.label,
            "phase": t.phase,
            "p50": fmt_s(t.p50),
            "p90": fmt_s(t.p90),
            "w50": 100.0 * (t.p50 or 0.0) / top,
            "w90": 100.0 * (t.p90 or 0.0) / top,
            "share": t.p50 or 0.0,
        }
        for t in phases
    ]
    total = sum(r["share"] for r in rows)
    for r in rows:
        r["share"] = 100.0 * r["share"] / total if total > 0 else 0.0
    totals = next(t for t in summary.timings if t.phase == "total_s")
    return {"rows": rows, "total_p50": fmt_s(totals.p50), "total_p90": fmt_s(totals.p90)}


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("coding_agent_rl.report", "assets"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt_s=fmt_s, fmt_n=fmt_n, fmt_reward=fmt_reward)
    return env


def render_html(run: RunData, tokens: TokenTable, *, max_rollouts: int | None) -> str:
    """The page for an already loaded run (see :func:`render_report`)."""
    summary = summarize(run)
    totals = [num((r.result.get("timings") or {}).get("total_s")) for r in run.rollouts]
    max_total = max([t for t in totals if t is not None] + [0.0])
    rows = [_row(r, max_total) for r in run.rollouts]
    details = {
        r.key: script_json(rollout_payload(r, run.run_dir, _facts(r.result))) for r in run.rollouts
    }
    s = run.summary
    page_meta = {
        "decoded": tokens.decoded,
        "tokenizer_note": tokens.note,
        "max_rollouts": max_rollouts,
    }
    return (
        _environment()
        .get_template("report.html.jinja")
        .render(
            title=f"coding-agent-rl · {s.get('run_id') or run.run_dir.name}",
            run=s,
            run_dir=str(run.run_dir),
            summary=summary,
            chart=_chart(summary),
            rows=rows,
            outcome_labels=OUTCOME_LABELS,
            details=details,
            vocab=script_json({str(k): v for k, v in tokens.texts.items()}),
            special=script_json(sorted(tokens.special)),
            page_meta=script_json(page_meta),
            tokens=tokens,
            omitted=sum(1 for r in run.rollouts if not r.has_detail),
            max_rollouts=max_rollouts,
            warnings=run.warnings,
            generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            config=[(k, s.get(k)) for k in ("agent", "sandbox", "policy", "dataset", "tokenizer")],
            trees=tree_rows(run.rollouts),
        )
    )


def render_report(
    run_dir: str | Path,
    output: str | Path,
    *,
    tokenizer: str | None = None,
    max_rollouts: int | None = DEFAULT_MAX_ROLLOUTS,
) -> Path:
    """Write the HTML report of ``run_dir`` to ``output`` and return its path.

    ``tokenizer``: a ``load_tokenizer`` spec (default: summary.json's ``tokenizer``); when it
    cannot load, token ids are shown and the page says why. ``max_rollouts``: rollouts whose
    detail is embedded (the table always lists every rollout); None embeds all.
    """
    run = load_run(run_dir, max_detail=max_rollouts)
    spec = tokenizer or (
        run.summary.get("tokenizer") if isinstance(run.summary.get("tokenizer"), str) else None
    )
    ids = (
        t for r in run.rollouts if r.has_detail for s in r.samples for t in s.get("tokens") or ()
    )
    table = build_token_table(spec, ids)
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(run, table, max_rollouts=max_rollouts), encoding="utf-8")
    return out


__all__ = ["DEFAULT_MAX_ROLLOUTS", "render_html", "render_report"]
