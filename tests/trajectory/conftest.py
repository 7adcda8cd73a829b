"""Fixtures for the trajectory end-to-end tests: the real Claude Code binary (through the harness's
package cache: the pinned tarball from ~/.cache/coding-agent-rl/agents, fetched with `npm pack`
and integrity-checked when missing; a missing binary FAILS, it never skips), the real tokenizer,
and a scripted CPU policy behind the real adapter."""

from __future__ import annotations

from pathlib import Path

import pytest

from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
from coding_agent_rl.harness import cache
from coding_agent_rl.harness.claude_code import ClaudeCode
from coding_agent_rl.model.render import Renderer
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.policy.server import PolicyServer


@pytest.fixture(scope="session")
def claude_binary() -> Path:
    try:
        return cache.unpacked(ClaudeCode.package)[ClaudeCode.package.main]
    except cache.FetchError as e:
        pytest.fail(f"the Claude Code binary is unavailable: {e}")


@pytest.fixture
async def agent_stack(tokenizer):
    """``start(script, renderer=None)`` -> (adapter, adapter base URL); stopped after the test."""
    started: list = []

    async def start(script: dict, renderer: Renderer | None = None):
        renderer = renderer or Renderer(tokenizer)
        policy = PolicyServer(ScriptedPolicy(script), tokenizer, "qwen25")
        policy_url = await policy.start()
        started.append(policy)
        adapter = AdapterServer(
            AdapterConfig(sglang_url=policy_url, renderer=renderer, tool_parser="qwen25")
        )
        url = await adapter.start()
        started.append(adapter)
        return adapter, url

    yield start
    for server in reversed(started):
        await server.stop()
