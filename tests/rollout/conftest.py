"""Fixtures for the end-to-end rollout tests: the example rows, their images built (the shared
``example_images`` / ``example_rows`` of tests/support/fixtures.py)."""

from __future__ import annotations

import pytest

from coding_agent_rl.datasets.schema import TaskRow


@pytest.fixture(scope="session")
def rows(example_images: None, example_rows: dict[str, TaskRow]) -> dict[str, TaskRow]:
    """The example tasks by short name (``slugify``, ``pager``, ...), in file order."""
    return example_rows
