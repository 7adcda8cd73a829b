"""Under ``CI=true`` every skip is a failure, wherever it is raised: in a test (setup, call,
teardown) and at collection (``pytest.skip(allow_module_level=True)``, ``importorskip``).
A pytest plugin, loaded by ``tests/conftest.py``; an expected failure stays one."""

from __future__ import annotations

import os
from typing import Any

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _reason(longrepr: Any) -> Any:
    return longrepr[2] if isinstance(longrepr, tuple) else longrepr


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A skipped test fails, with its reason."""
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"CI=true: a skipped test is a failure here: {_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    """A module skipped while it is collected fails, with its reason."""
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true: a module skipped at collection is a failure here: {_reason(report.longrepr)}"
        )
