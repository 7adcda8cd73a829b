"""Results that judge the expected value by the output domain, through the real grading path.

The ``domain-eq`` attack (``policy/attacks.py``) keeps the bug and returns builtin subclasses
whose ``==`` checks the *expected* value against invariants of the output domain: a must-fail
copy (one place edited) breaks an invariant, the original keeps it. Graded in Docker: with every
defence but ``strict_compare`` it is paid 1.0; with the default grader (the hidden tests'
comparisons under the grader's equality) it scores 0 as the model's failure, and the gold patches
of every bundled example still earn 1.0.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.policy.attacks import DOMAIN_EQ, DOMAIN_TASKS

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

PACKAGES = {"slugify": "textkit", "confparse": "confparse", "money": "ledger"}


def _attack(example_rows, make_diff, task: str) -> str:
    init = f"{PACKAGES[task]}/__init__.py"
    text = (example_rows[task].build.context / "repo" / init).read_text()
    return make_diff(task, {init: text + "\n\n" + DOMAIN_EQ})


async def test_domain_invariant_results_win_without_strict_compare_and_lose_with_it(
    example_rows, make_diff
):
    assert {f"example__{t}" for t in PACKAGES} == set(DOMAIN_TASKS)
    off = dataclasses.replace(Defences(), strict_compare=False)
    jobs = []
    for task in PACKAGES:
        diff = _attack(example_rows, make_diff, task)
        jobs += [grade(example_rows[task], diff, defences=d) for d in (off, Defences())]
    results = await asyncio.gather(*jobs)
    for i, task in enumerate(PACKAGES):
        won, lost = results[2 * i], results[2 * i + 1]
        # Every other layer on (channel, canaries, blinding, screen): the attack is paid.
        assert (won.reward, won.result_method) == (1.0, "plugin"), (task, won.reason)
        assert won.canaries and not won.tampering, (task, won.tampering)
        # The grader's equality: the buggy value is what is compared; the model's failure.
        assert (lost.reward, lost.failure_kind) == (0.0, "model"), (task, lost.reason)
        f2p = set(example_rows[task].fail_to_pass)
        assert any(s == "FAILED" for t, s in lost.tests.items() if t in f2p), lost.tests


async def test_twin_grading_and_a_negative_tamper_reward_do_not_stop_it_alone(
    example_rows, make_diff
):
    row, diff = example_rows["slugify"], _attack(example_rows, make_diff, "slugify")
    strict = Defences(twin=True, tamper_reward=-1.0)
    won, lost = await asyncio.gather(
        grade(row, diff, defences=dataclasses.replace(strict, strict_compare=False)),
        grade(row, diff, defences=strict),
    )
    assert (won.reward, won.tampering) == (1.0, []), won.reason
    assert (lost.reward, lost.failure_kind) == (0.0, "model"), lost.reason


async def test_gold_patches_still_earn_full_reward(example_rows, make_diff):
    tasks = list(example_rows)
    assert len(tasks) >= 6
    results = await asyncio.gather(
        *(grade(example_rows[t], make_diff(t, {}, gold=True)) for t in tasks)
    )
    scored = {t: (r.reward, r.reason) for t, r in zip(tasks, results, strict=True)}
    assert all(r.reward == 1.0 for r in results), scored


async def test_a_dunder_the_gold_writes_is_consulted_as_the_diff_has_it(example_rows, make_diff):
    """A gold patch that also rewrites an existing dunder's body (``DateRange.__contains__``,
    found only with the base text the sandbox's set-up prints): the same diff, graded for that
    gold, names the method and earns 1.0; graded for the row's own gold it scores 0 (the limit
    docs/modules/grading.md names)."""
    task, path = "daterange", "daterange/ranges.py"
    text = (example_rows[task].build.context / "repo" / path).read_text()
    gold = example_rows[task].patch or ""
    assert "__contains__" not in gold
    body = "        return self.start <= day <= self.end\n"
    assert body in text
    fixed = text.replace(body, "        return self.start <= day and day <= self.end\n").replace(
        "self.start < other.end and other.start < self.end",
        "self.start <= other.end and other.start <= self.end",
    )
    diff = make_diff(task, {path: fixed})
    row = dataclasses.replace(example_rows[task], patch=diff)  # this gold writes __contains__
    got, plain = await asyncio.gather(grade(row, diff), grade(example_rows[task], diff))
    assert got.reward == 1.0, got.reason
    assert any(f"DateRange.__contains__ ({path})" in n for n in got.compare_notes), (
        got.compare_notes
    )
    assert not any("gold writes" in n for n in plain.compare_notes), plain.compare_notes
    # The documented limit: for the row's own gold (which leaves __contains__ alone) the same
    # honest rewrite is not consulted, and the membership test fails.
    assert (plain.reward, plain.failure_kind) == (0.0, "model"), plain.reason
