"""Fixtures for the report tests: one realistic run directory and its rendered page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.report_fixture import write_fixture_run

from coding_agent_rl.report import render_report


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """Written with the real Qwen3 tokenizer (the shared ``tokenizer`` fixture): a tokenizer
    that cannot load fails these tests, never falls back to stand-in ids."""
    return write_fixture_run(tmp_path_factory.mktemp("run") / "out", tokenizer.encode)


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory, run_dir: Path) -> Path:
    return render_report(
        run_dir, tmp_path_factory.mktemp("report") / "report.html", tokenizer="qwen3"
    )
