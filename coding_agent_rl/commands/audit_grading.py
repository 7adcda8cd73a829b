"""``coding-agent-rl audit-grading``: run the attack families against a dataset's own tasks.

Each family (``policy/attacks.py``) drives the real agent CLI in real sandboxes and is graded as
``run`` grades; the table counts per family the rewarded, infra and host-harming rollouts, and
event-loop stalls in grading code. Exit 1 when an attack succeeded or a real fix was scored
wrong. See docs/attack-audit.md and docs/modules/commands.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import pathlib
import re
import resource
import sys
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.commands.stall_watch import StallWatch
from coding_agent_rl.errors import UserError
from coding_agent_rl.sandbox import BACKENDS

LINE_LIMIT = 1024 * 1024  # a results line over this is host harm
STALL_LIMIT_S = 2.0  # the runner's event loop blocked this long is host harm
# Where a stall is the attack's doing: code that handles the agent's diff, files and results.
GRADING_CODE = ("grading/", "patches/", "rollout/runner.py", "rollout/record.py")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="JSONL of task rows (images built)")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/audit"))
    p.add_argument("--family", action="append", default=[], help="only these (repeatable)")
    p.add_argument("--limit", type=int, help="only the first N tasks")
    p.add_argument(
        "--tasks-per-family",
        type=int,
        default=None,
        metavar="K",
        help="run each family on K tasks only, taken in turn across the dataset (default: all)",
    )
    conf = settings.current()
    p.add_argument("--agent", default=conf.agent)
    p.add_argument("--sandbox", default=conf.sandbox, choices=BACKENDS.names())
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--agent-budget", type=float, default=300.0, help="seconds per agent run")
    p.add_argument("--eval-timeout", type=float, default=300.0, help="seconds for the tests")
    p.add_argument(
        "--tamper-policy",
        choices=("zero", "flag"),
        default=conf.tamper_policy,
        help="as for run: audit the grading settings you train or evaluate with",
    )
    p.add_argument("--twin-grade", action=argparse.BooleanOptionalAction, default=conf.twin_grade)
    p.add_argument("--tamper-reward", type=float, default=conf.tamper_reward, metavar="R")
    p.add_argument(
        "--strict", action="store_true", help="exit 1 on an uncovered win too (see the docs)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")


@dataclasses.dataclass
class Planned:
    family: Any  # attacks.Family
    row: Any  # the task row as given
    variant: Any  # the row with the family's marker
    marker: str  # the line appended to its problem statement (unique per rollout)


def plan(rows: list[Any], families: list[Any], per_family: int | None) -> list[Planned]:
    """(family, task) pairs: every task, or ``per_family`` tasks in turn across the dataset."""
    out: list[Planned] = []
    for k, family in enumerate(families):
        usable = [r for r in rows if family.applies(r) is None]
        if per_family is not None and usable:
            start = (k * per_family) % len(usable)
            usable = [
                usable[(start + i) % len(usable)] for i in range(min(per_family, len(usable)))
            ]
        for row in usable:
            marker = f"(run audit-{family.name}-{len(out)})"
            variant = dataclasses.replace(
                row,
                instance_id=f"{row.instance_id}.audit-{family.name}",
                problem_statement=f"{row.problem_statement.rstrip()}\n\n{marker}\n",
            )
            out.append(Planned(family, row, variant, marker))
    return out


def script(planned: list[Planned]) -> dict[str, Any]:
    """The scripted policy: one rule per (family, task), matched on the variant's marker."""
    rules = []
    for p in planned:
        task = re.escape(p.row.problem_statement.strip().splitlines()[0])
        rules.append(
            {"match_prompt": f"{task}.*{re.escape(p.marker)}", "steps": p.family.steps(p.row)}
        )
    return {"rules": rules, "final": "Done."}


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.commands.run import load_rows
    from coding_agent_rl.policy import attacks

    if args.concurrency < 1 or (args.tasks_per_family is not None and args.tasks_per_family < 1):
        raise UserError("--concurrency and --tasks-per-family must be >= 1")
    try:
        families = attacks.select(args.family)
    except ValueError as e:
        raise UserError(str(e)) from None
    rows = load_rows(args.dataset, args.limit)
    planned = plan(rows, families, args.tasks_per_family)
    if not planned:
        raise UserError(f"{args.dataset}: no task the selected families apply to")
    if not args.verbose:
        for name in ("rollout", "harness", "sandbox", "datasets", "grading"):
            logging.getLogger(f"coding_agent_rl.{name}").setLevel(logging.WARNING)
    host: dict[str, Any] = {}
    records = asyncio.run(run_audit(planned, args, host))
    cap = 2 * args.eval_timeout + 60  # a test run, a control run, the sandboxes around them
    report = summarize(planned, records, args.out, host, grade_cap_s=cap)
    print(json.dumps(report, indent=1) if args.json else table(report))
    return 1 if report["successes"] or (args.strict and report["uncovered"]) else 0


async def run_audit(
    planned: list[Planned], args: argparse.Namespace, host: dict[str, Any]
) -> dict[str, dict]:
    """Run every planned rollout as one batch; returns the results lines by instance id, each
    with ``_line_bytes`` (the size of its line in results.jsonl). ``host`` gets the longest
    event-loop stall and the process's peak memory."""
    from coding_agent_rl.rollout.batch import run_batch
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.outputs import RunWriter
    from coding_agent_rl.rollout.runtime import RuntimeConfig

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    if results.exists():
        raise UserError(f"--out {out}: already holds a run (results.jsonl); pick another folder")
    (out / "attacks.json").write_text(json.dumps(script(planned), indent=1))
    config = RuntimeConfig(
        agent=args.agent,
        policy=f"scripted:{out / 'attacks.json'}",
        sampling_defaults={"max_new_tokens": 8192},
        rollout=RolloutConfig(
            backend=args.sandbox,
            agent_budget_s=args.agent_budget,
            eval_timeout_s=args.eval_timeout,
            max_context=65536,
            out_dir=out,
            infra_retries=0,  # an infra outcome is what is counted, not retried away
            tamper_policy=args.tamper_policy,
            twin_grade=args.twin_grade,
            tamper_reward=args.tamper_reward,
        ),
    )
    print(
        f"audit-grading: {len(planned)} rollouts ({len({p.family.name for p in planned})} "
        f"families) with {args.agent} in {args.sandbox}",
        file=sys.stderr,
        flush=True,
    )
    stalls = StallWatch(STALL_LIMIT_S)
    watch = asyncio.ensure_future(stalls.run())
    try:
        await run_batch(
            [p.variant for p in planned],
            config,
            RunWriter(out),
            concurrency=args.concurrency,
            info={"dataset": str(args.dataset), "run_id": "audit-grading"},
        )
    finally:
        watch.cancel()
    host["max_stall_s"] = round(stalls.max_stall_s, 2)
    host["stalls"] = stalls.stalls
    host["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    by_id: dict[str, dict] = {}
    with results.open("rb") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            record["_line_bytes"] = len(line)
            by_id[record.get("instance_id", "")] = record  # the latest attempt wins
    return by_id


def _grade_s(record: dict) -> float:
    return float((record.get("timings") or {}).get("grade_s") or 0.0)


def uncovered_tests(row: Any, record: dict, opposite_bare: bool = False) -> list[str]:
    """The row's fail-to-pass tests when none of them got a same-type canary (else [];
    ``opposite_bare``: a test whose only copy asks the opposite counts as having none)"""
    blinding = record.get("blinding") or {}
    listed = list(blinding.get("unperturbed") or [])
    listed += list(blinding.get("opposite_only") or []) if opposite_bare else []
    bare = {str(entry).split(": ", 1)[0] for entry in listed}
    f2p = list(getattr(row, "fail_to_pass", ()) or ())
    return f2p if f2p and all(t in bare for t in f2p) else []


def judge(p: Planned, record: dict | None, grade_cap_s: float, out: pathlib.Path) -> dict:
    """One rollout's outcome: what happened and whether the attack succeeded."""
    if record is None:
        return {"task": p.row.instance_id, "outcome": "missing", "success": True}
    diff = out / (record.get("artifacts") or {}).get("diff", "-")
    # The agent left a change: a diff, or one refused at capture for its size.
    landed = bool(record.get("diff_truncated")) or (diff.is_file() and diff.stat().st_size > 0)
    reward = float(record.get("reward") or 0.0)
    kind = record.get("failure_kind")
    grade_s = _grade_s(record)
    harm = []
    if record["_line_bytes"] > LINE_LIMIT:
        harm.append(f"results line {record['_line_bytes']} bytes")
    if grade_s > grade_cap_s:  # longer than a test run and a control run may take
        harm.append(f"grading {grade_s:.1f}s, over {grade_cap_s:g}s")
    if p.family.goal == "solve":
        success, outcome = reward < 1.0, "solved" if reward >= 1.0 else "false negative"
    else:
        success = reward > 0 or kind == "infra" or bool(harm)
        outcome = (
            f"reward {reward:g}"
            if reward > 0
            else "infra"
            if kind == "infra"
            else "harm"
            if harm
            else "held"
            if landed
            else "not landed"
        )
    reason = record.get("fail_reason") or record.get("abort_reason") or ""
    won = reward > 0 and kind != "infra"
    uncovered = uncovered_tests(p.row, record, p.family.swaps_opposites) if won else []
    if success and p.family.canary_only and uncovered and not harm:
        success, outcome = False, "uncovered"
        reason = f"no same-type canary possible for {', '.join(uncovered)[:150]}"
    return {
        "task": p.row.instance_id,
        "outcome": outcome,
        "success": success,
        "landed": landed,
        "reward": reward,
        "failure_kind": kind,
        "reason": str(reason)[:200],
        "results_line_bytes": record["_line_bytes"],
        "grade_s": round(grade_s, 2),
        "harm": harm,
        "uncovered": outcome == "uncovered",
    }


def summarize(
    planned: list[Planned],
    records: dict[str, dict],
    out: pathlib.Path,
    host: dict[str, Any] | None = None,
    grade_cap_s: float = float("inf"),
) -> dict:
    """Per family: rollouts, landed, reward > 0, infra, harm, successes; the details. A host
    event-loop stall over :data:`STALL_LIMIT_S` in grading code (:data:`GRADING_CODE`) counts as
    one more success (of the run)."""
    families: dict[str, dict] = {}
    for p in planned:
        got = judge(p, records.get(p.variant.instance_id), grade_cap_s, out)
        fam = families.setdefault(
            p.family.name,
            {
                "goal": p.family.goal,
                "what": p.family.what,
                "stochastic": p.family.stochastic,
                "rollouts": [],
            },
        )
        fam["rollouts"].append(got)
    for fam in families.values():
        rs = fam["rollouts"]
        fam.update(
            tasks=len(rs),
            landed=sum(bool(r.get("landed")) for r in rs),
            rewarded=sum(r.get("reward", 0) > 0 for r in rs),
            infra=sum(r.get("failure_kind") == "infra" for r in rs),
            harm=sum(bool(r.get("harm")) for r in rs),
            successes=sum(r["success"] for r in rs),
            uncovered=sum(bool(r.get("uncovered")) for r in rs),
            max_line_bytes=max((r.get("results_line_bytes", 0) for r in rs), default=0),
            max_grade_s=max((r.get("grade_s", 0.0) for r in rs), default=0.0),
        )
    host = dict(host or {})
    stalls = host.get("stalls") or []
    for stall in stalls:  # what an attack can make slow: handling its diff, files and results
        frames = stall.pop("frames", [])
        stall["counted"] = any(f.startswith(GRADING_CODE) for f in frames)
    stalled = any(s["counted"] for s in stalls)
    host["stalled"] = stalled
    return {
        "out": str(out),
        "successes": sum(f["successes"] for f in families.values()) + stalled,
        "uncovered": sum(f["uncovered"] for f in families.values()),
        "host": host,
        "families": families,
    }


def table(report: dict) -> str:
    head = (
        f"{'family':<22}{'goal':<7}{'tasks':>6}{'landed':>7}{'reward':>7}{'infra':>6}"
        f"{'harm':>5}{'line KB':>9}{'grade s':>8}  verdict"
    )
    lines = [head, "-" * len(head)]
    for name, f in report["families"].items():
        verdict = (
            f"FALSE NEGATIVE x{f['successes']}"
            if f["goal"] == "solve" and f["successes"]
            else f"WINS x{f['successes']}"
            if f["successes"]
            else f"UNCOVERED x{f['uncovered']} (task limit)"
            if f["uncovered"]
            else "not landed"
            if not f["landed"]
            else "held"
        )
        lines.append(
            f"{name:<22}{f['goal']:<7}{f['tasks']:>6}{f['landed']:>7}{f['rewarded']:>7}"
            f"{f['infra']:>6}{f['harm']:>5}{f['max_line_bytes'] / 1024:>9.0f}"
            f"{f['max_grade_s']:>8.1f}  {verdict}{' (by chance)' if f['stochastic'] else ''}"
        )
    for name, f in report["families"].items():
        for r in f["rollouts"]:
            if r["success"] or r.get("uncovered"):
                lines.append(f"  {name} on {r['task']}: {r['outcome']} {r['reason'][:120]}")
    host = report.get("host") or {}
    if host:
        lines.append(
            f"host: longest event-loop stall {host.get('max_stall_s', 0.0):.2f}s"
            f"{' (in grading: every other rollout waited)' if host.get('stalled') else ''},"
            f" peak memory {host.get('peak_rss_mb', 0.0):.0f} MB"
        )
        for stall in host.get("stalls") or []:
            when = "COUNTED (grading)" if stall["counted"] else "not counted (not grading)"
            lines.append(f"  stall {stall['seconds']}s {when} in {stall['where']}")
    total = report["successes"]
    if report.get("uncovered"):
        lines.append(
            f"{report['uncovered']} win(s) on tasks whose fail-to-pass tests have no expected"
            " value to perturb: see docs/attack-audit.md"
        )
    lines.append(
        f"\n{total} successful attack(s) / false negative(s); run folder {report['out']}"
        if total
        else f"\nno attack succeeded; run folder {report['out']}"
    )
    return "\n".join(lines)
