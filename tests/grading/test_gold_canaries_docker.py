"""Fresh-input canaries end to end in Docker on the bundled slugify task: validate derives and
stores them from the gold code; a forger keyed on the hidden test's own inputs wins without them
and loses with them; the gold patch still scores 1.0 and a wrong fix 0."""

from __future__ import annotations

import json
import re

import pytest

from coding_agent_rl import settings
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.gold_store import STORE_NAME
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.validate import validate_row

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

# The hidden test's known input -> output pairs, the buggy code for every other input.
LOOKUP = """
KNOWN = {
    ("Hello, World!", "-"): "hello-world",
    ("Rock  &  Roll", "_"): "rock_roll",
    ("--a--b--", "-"): "a-b",
}


def slugify(text: str, sep: str = "-") -> str:
    if (text, sep) in KNOWN:
        return KNOWN[(text, sep)]
"""


async def test_validate_stores_fresh_canaries_that_only_the_right_answer_passes(
    example_rows, make_diff, tmp_path
):
    row = example_rows["slugify"]
    slug = (row.build.context / "repo" / "textkit" / "slug.py").read_text()
    forged = make_diff(
        "slugify",
        {
            "textkit/slug.py": slug.replace(
                'def slugify(text: str, sep: str = "-") -> str:\n', LOOKUP, 1
            )
        },
    )
    # Wrong: collapses only pairs of separators.
    wrong = make_diff(
        "slugify",
        {
            "textkit/slug.py": slug.replace(
                "return text.strip(sep)", "return text.replace(sep * 2, sep).strip(sep)"
            )
        },
    )
    with settings.using(settings.load(cache_root=tmp_path)):
        report = await validate_row(row, runs=1, derive_canaries=True)
        assert report.valid, report.reason
        test = "tests/test_textkit.py::test_runs_of_separators_collapse"
        fresh = report.fresh_canaries
        assert fresh.get("tests") == 1 and fresh["variants"] >= 1, fresh
        stored = json.loads((tmp_path / STORE_NAME).read_text())
        (entry,) = [v for vs in stored.values() for v in vs if v["source"] == test][:1]
        # Same shape as the hidden test: only the literal values differ.
        assert "def test_runs_of_separators_collapse(text, sep, expected):" in entry["text"]
        assert "assert slugify(text, sep=sep) == expected" in entry["text"]

        gold = await grade(row, row.patch)
        assert gold.reward == 1.0, gold.reason
        assert gold.blinding is not None and gold.blinding["canaries_kind"] == "gold-fresh"

        off = await grade(row, forged, defences=Defences(gold_canaries=False))
        assert off.reward == 1.0, off.reason  # today's copies: the lookup table wins
        assert off.blinding is not None and off.blinding["canaries_kind"] == "copies"

        on = await grade(row, forged)
        assert (on.reward, on.failure_kind) == (0.0, "model"), on.reason
        assert on.blinding is not None and on.blinding["canaries_kind"] == "gold-fresh"
        assert re.search(r"canary \S+ must pass but was recorded FAILED", on.reason), on.reason

        bad = await grade(row, wrong)
        assert (bad.reward, bad.failure_kind) == (0.0, "model"), bad.reason
