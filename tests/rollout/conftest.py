"""Fixtures for the end-to-end rollout tests: the example images and the example rows."""

from __future__ import annotations

import pytest
from rollout_helpers import TASKS

from coding_agent_rl.datasets.schema import TaskRow, load_dataset


@pytest.fixture(scope="session")
def example_images() -> None:
    """Build the example images (about a second when they are up to date)."""
    from coding_agent_rl.images.base import BASE_IMAGE, image_exists
    from coding_agent_rl.images.dataset import build_dataset_images

    if not image_exists(BASE_IMAGE):
        pytest.fail(f"{BASE_IMAGE} is missing: run `coding-agent-rl images base` first")
    build_dataset_images(TASKS)


@pytest.fixture(scope="session")
def rows(example_images) -> dict[str, TaskRow]:
    """The example tasks by short name (``slugify``, ``pager``, ...), in file order."""
    return {r.instance_id.split("__", 1)[1]: r for r in load_dataset(TASKS)}
