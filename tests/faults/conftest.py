"""Fixtures for the fault tests: the example rows with their images built."""

from __future__ import annotations

import pytest

from coding_agent_rl.datasets.schema import TaskRow


@pytest.fixture(scope="session")
def rows(example_images: None, example_rows: dict[str, TaskRow]) -> list[TaskRow]:
    """Three example tasks, in file order: one batch's rows."""
    return list(example_rows.values())[:3]
