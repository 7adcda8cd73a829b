"""An exception that escapes grading is charged by its stage: the model's where the stage handles
the agent's input (``grader_error`` recorded, counted in the summary and metrics.prom), infra
where it does not. Faults are injected into the real functions grade() calls."""

from __future__ import annotations

import importlib

import pytest

from coding_agent_rl.grading.grade import grade
from coding_agent_rl.rollout.outputs import MetricTotals, summarize

grade_mod = importlib.import_module("coding_agent_rl.grading.grade")
DIFF = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


def _raise(exc: BaseException):
    def f(*args, **kwargs):
        raise exc

    return f


async def test_an_exception_on_the_agents_diff_is_the_models(example_rows, monkeypatch):
    monkeypatch.setattr(grade_mod, "filter_patch", _raise(RecursionError("too deep " * 500)))
    result = await grade(example_rows["slugify"], DIFF)
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert result.grader_error is not None
    assert result.grader_error["stage"] == "diff"
    assert result.grader_error["type"] == "RecursionError"
    assert len(result.grader_error["message"]) == 500  # capped
    assert result.record_fields()["grader_error"] == result.grader_error


@pytest.mark.docker
@pytest.mark.usefixtures("example_images")
async def test_an_exception_preparing_the_task_stays_infra(example_rows, monkeypatch):
    monkeypatch.setattr(grade_mod, "prepare_grading", _raise(KeyError("image layout")))
    result = await grade(example_rows["slugify"], DIFF)
    assert (result.reward, result.failure_kind, result.grader_error) == (0.0, "infra", None)
    assert "stage prepare" in result.reason


def test_grader_errors_are_counted_in_the_summary_and_metrics(tmp_path):
    records = [
        {"reward": 0.0, "failure_kind": "model", "grader_error": {"stage": "screen"}},
        {"reward": 0.0, "failure_kind": "model", "grader_error": {"stage": "screen"}},
        {"reward": 1.0, "failure_kind": None, "grader_error": None},
    ]
    summary = summarize(records)
    assert summary["grader_errors"] == 2 and summary["grader_errors_by_stage"] == {"screen": 2}
    totals = MetricTotals()
    for r in records:
        totals.add(r)
    totals.write(tmp_path / "metrics.prom")
    text = (tmp_path / "metrics.prom").read_text()
    assert 'coding_agent_rl_grader_errors_total{stage="screen"} 2.0' in text
