"""Fixtures for the report tests: one realistic run directory and its rendered page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.report_fixture import write_fixture_run

from coding_agent_rl.report import render_report


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The real Qwen3 tokenizer, or None where it cannot load (tests needing it then skip)."""
    try:
        from coding_agent_rl.tokenizer import load_tokenizer

        return load_tokenizer("qwen3")
    except Exception as e:  # the stand-in encoder keeps the other tests meaningful
        print(f"report tests: real tokenizer unavailable ({e}); using stand-in ids")
        return None


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    encode = (lambda text: tokenizer.encode(text)) if tokenizer is not None else None
    return write_fixture_run(tmp_path_factory.mktemp("run") / "out", encode)


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory, run_dir: Path, tokenizer: Any) -> Path:
    spec = "qwen3" if tokenizer is not None else None
    return render_report(run_dir, tmp_path_factory.mktemp("report") / "report.html", tokenizer=spec)
