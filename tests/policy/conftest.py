"""Fixtures for the CPU policy tests: the real Qwen3 tokenizer and renderer."""

from __future__ import annotations

import pytest

from coding_agent_rl.adapter.render import Renderer
from coding_agent_rl.tokenizer import load_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return load_tokenizer("qwen3")


@pytest.fixture(scope="session")
def renderer(tokenizer):
    return Renderer(tokenizer)
