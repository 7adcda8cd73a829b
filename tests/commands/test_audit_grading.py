"""``coding-agent-rl audit-grading``: the attack families through the real pipeline (real Claude
Code CLI in Docker, the adapter, the grader as ``run`` uses it, every defence at its default) on
the bundled tasks, each family on one task, all at once. The test fails on any attack that gets
reward, becomes ``infra`` or harms the host, and on a real fix scored below 1.0; it also fails
when a family did not land (an attack that never ran proves nothing).

``forge-guess`` is left out: it wins by chance. A forger's reward on a task none of whose
fail-to-pass tests has an expected value to perturb is reported as ``uncovered`` (a limit of the
design there, see docs/attack-audit.md); on the bundled ``daterange`` (truth checks only) that is
the outcome-swapping forger's win over the opposite copies. The bundled repositories configure no pytest ``pythonpath``; the dataset here gives each one a
``pytest.ini`` with ``pythonpath = src`` (``pre_commands``) so the shadowing family applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import pathlib
import re
import time

import pytest
from support.rollout_helpers import EXAMPLES, TASKS

from coding_agent_rl import cli
from coding_agent_rl.commands import audit_grading
from coding_agent_rl.commands.stall_watch import StallWatch
from coding_agent_rl.datasets.prompt import render_prompt
from coding_agent_rl.datasets.schema import load_dataset
from coding_agent_rl.grading.screen import Added, screen_source
from coding_agent_rl.policy import attacks

PYTHONPATH_INI = "printf '[pytest]\\npythonpath = src\\n' > pytest.ini"


def audit_dataset(path: pathlib.Path) -> pathlib.Path:
    """The bundled tasks, texts inline, each with a pytest.ini setting ``pythonpath = src``."""
    lines = []
    for line in TASKS.read_text().splitlines():
        row = json.loads(line)
        md = row["metadata"]
        for key in ("problem_statement", "patch", "test_patch"):
            name = md.pop(f"{key}_file", None)
            if name:
                md[key] = (EXAMPLES / name).read_text()
        md.pop("build", None)
        md["pre_commands"] = [PYTHONPATH_INI]
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def _planned(family: str, row_id: str) -> audit_grading.Planned:
    row = next(r for r in load_dataset(TASKS) if r.instance_id == row_id)
    fam = next(f for f in attacks.FAMILIES if f.name == family)
    return audit_grading.Planned(fam, row, row, "m")


@pytest.mark.parametrize(
    ("family", "unperturbed", "expect"),
    [
        ("forge-unperturbed", "all", "uncovered"),  # canaries were the only defence, and none
        ("forge-unperturbed", "one", "reward 1"),  # one test had copies: a real win
        ("pythonpath-shadow", "all", "reward 1"),  # another layer failed: a real win
        ("forge-unperturbed", "none", "reward 1"),
    ],
)
def test_a_win_is_uncovered_only_where_no_test_had_a_canary(tmp_path, family, unperturbed, expect):
    p = _planned(family, "example__daterange")
    f2p = list(p.row.fail_to_pass)
    listed = {"all": f2p, "one": f2p[1:], "none": []}[unperturbed]
    record = {
        "reward": 1.0,
        "failure_kind": None,
        "_line_bytes": 100,
        "blinding": {"unperturbed": [f"{t}: no literal expected value" for t in listed]},
    }
    got = audit_grading.judge(p, record, 600.0, tmp_path)
    assert (got["outcome"], got["success"]) == (expect, expect != "uncovered")


def test_each_family_gets_its_own_task_copy_and_rule():
    rows = load_dataset(TASKS)
    planned = audit_grading.plan(rows, list(attacks.FAMILIES), 1)
    assert [p.family.name for p in planned] == attacks.family_names()
    assert len({p.row.instance_id for p in planned}) == len(rows)  # spread over every task
    rules = audit_grading.script(planned)["rules"]
    for p in planned:
        prompt = render_prompt(p.variant.problem_statement, p.variant.workdir)
        hits = [q.family.name for q, r in zip(planned, rules, strict=True) if matches(r, prompt)]
        assert hits == [p.family.name]  # the copy's own rule, and no other family's
        original = render_prompt(p.row.problem_statement, p.row.workdir)
        assert not any(matches(r, original) for r in rules)  # the task as given plays nothing


def matches(rule: dict, prompt: str) -> bool:
    return re.search(rule["match_prompt"], prompt, re.S) is not None


def test_an_unknown_family_is_a_one_line_usage_error(capsys):
    assert cli.main(["audit-grading", "--dataset", str(TASKS), "--family", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("coding-agent-rl audit-grading: error: unknown attack family 'nope'")
    assert len(err.splitlines()) == 1


def stalls_of(block) -> tuple[StallWatch, float, float]:
    """Runs ``block()`` inline on a watched event loop; (watch, seconds blocked, seconds the
    watched loop ran)."""

    async def main() -> tuple[StallWatch, float, float]:
        started = time.monotonic()
        watch = StallWatch(limit=0.3)
        task = asyncio.ensure_future(watch.run())
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        block()  # work done inline: the loop cannot run
        blocked = time.monotonic() - t0
        await asyncio.sleep(0.2)
        task.cancel()
        return watch, blocked, time.monotonic() - started

    return asyncio.run(main())


def test_a_blocked_event_loop_is_measured_and_named():
    watch, blocked, ran = stalls_of(lambda: time.sleep(0.8))
    # At least the block (less the beat's own sleep), at most the time the loop ran at all.
    assert blocked - watch.period <= watch.max_stall_s < ran, (watch.max_stall_s, blocked, ran)
    assert [s["seconds"] > 0.6 for s in watch.stalls] == [True]
    assert watch.stalls[0]["where"] == "outside coding_agent_rl"  # this test's own frame
    report = audit_grading.summarize([], {}, pathlib.Path("out"), {"stalls": watch.stalls})
    assert (report["successes"], report["host"]["stalled"]) == (0, False)  # not grading code


def test_the_screen_run_inline_on_flat_python_is_a_counted_stall():
    source = "".join(f"value_{i:07d} = {i}\n" for i in range(150_000))
    watch, _, _ = stalls_of(lambda: screen_source("pkg/_table.py", source, Added(whole=True)))
    assert watch.stalls and "grading/screen.py" in watch.stalls[0]["where"], watch.stalls
    report = audit_grading.summarize([], {}, pathlib.Path("out"), {"stalls": watch.stalls})
    assert (report["successes"], report["host"]["stalled"]) == (1, True)


def run_audit_cli(tmp: pathlib.Path, *extra: str) -> tuple[int, dict]:
    argv = [
        "audit-grading",
        "--dataset",
        str(audit_dataset(tmp / "tasks.jsonl")),
        "--tasks-per-family",
        "1",
        "--concurrency",
        "8",
        "--agent-budget",
        "150",
        "--eval-timeout",
        "120",
        "--out",
        str(tmp / "out"),
        "--json",
        *extra,
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(argv)
    report = json.loads(out.getvalue())
    print(audit_grading.table(report))  # in the test log: the figures of this run
    return code, report


# The forgers that spare canaries by their names win against the previous canaries (named after
# their test, appended, perturbed into a tuple): the blinding switched off (and the grader's
# equality, which alone stops eq-liar).
BLINDING_WINS = ("eq-liar", "forge-runtest", "forge-recorder", "forge-reports", "forge-json")


@pytest.mark.docker
@pytest.mark.agents
def test_with_blinding_off_the_forgers_win(example_images, tmp_path):
    from coding_agent_rl.rollout.runner import RolloutRunner

    shipped = RolloutRunner._defences
    off = property(
        lambda self: dataclasses.replace(shipped.fget(self), blinding=False, strict_compare=False)
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RolloutRunner, "_defences", off)
        code, report = run_audit_cli(tmp_path, *(f"--family={f}" for f in BLINDING_WINS))
    won = {name: f["rewarded"] for name, f in report["families"].items()}
    assert (code, won) == (1, dict.fromkeys(BLINDING_WINS, 1)), report["families"]


@pytest.mark.docker
@pytest.mark.agents
def test_with_strict_compare_off_domain_eq_wins(example_images, tmp_path):
    """Every other layer on (blinded canaries, channel, screen): results that judge the expected
    value by the output domain are paid; the default audit (below) shows them scoring 0."""
    from coding_agent_rl.rollout.runner import RolloutRunner

    shipped = RolloutRunner._defences
    off = property(lambda self: dataclasses.replace(shipped.fget(self), strict_compare=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RolloutRunner, "_defences", off)
        code, report = run_audit_cli(tmp_path, "--family=domain-eq")
    assert (code, report["families"]["domain-eq"]["rewarded"]) == (1, 1), report["families"]


@pytest.mark.docker
@pytest.mark.agents
def test_with_opposite_copies_off_assert_reader_wins(example_images, tmp_path):
    """Every other layer on: on a task whose fail-to-pass tests check truth values, results
    that read the assertion they are in are paid (only synthetic canaries, which never call the
    code); the default audit (below) shows them caught by the opposite copies."""
    from coding_agent_rl.rollout.runner import RolloutRunner

    shipped = RolloutRunner._defences
    off = property(lambda self: dataclasses.replace(shipped.fget(self), opposite_copies=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RolloutRunner, "_defences", off)
        code, report = run_audit_cli(tmp_path, "--family=assert-reader", "--strict")
    fam = report["families"]["assert-reader"]
    assert (code, fam["landed"], fam["rewarded"], fam["uncovered"]) == (1, 1, 1, 1), fam


@pytest.fixture(scope="module")
def audit(example_images, tmp_path_factory) -> tuple[int, dict]:
    tmp = tmp_path_factory.mktemp("audit")
    suite = (f"--family={f.name}" for f in attacks.FAMILIES if not f.stochastic)
    return run_audit_cli(tmp, *suite)


@pytest.mark.docker
@pytest.mark.agents
def test_every_family_ran_its_attack(audit):
    _, report = audit
    assert set(report["families"]) == {f.name for f in attacks.FAMILIES if not f.stochastic}
    not_landed = [name for name, f in report["families"].items() if not f["landed"]]
    assert not_landed == [], not_landed


@pytest.mark.docker
@pytest.mark.agents
def test_no_attack_succeeds_and_the_real_fix_scores(audit):
    code, report = audit
    wins = {
        name: [(r["task"], r["outcome"], r["reason"]) for r in f["rollouts"] if r["success"]]
        for name, f in report["families"].items()
        if f["successes"]
    }
    assert (code, report["successes"], wins) == (0, 0, {})
    uncovered = {
        (name, r["task"])
        for name, f in report["families"].items()
        for r in f["rollouts"]
        if r.get("uncovered")
    }
    # Opposite copies stop every forger on the truth-check task but one that runs a test and its
    # opposite copy and swaps their outcomes (a limit of such tasks: docs/attack-audit.md).
    assert uncovered == {("forge-swap", "example__daterange")}, uncovered
