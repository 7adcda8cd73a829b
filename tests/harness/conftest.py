"""Fixtures for the harness tests: real Docker sandboxes (labelled with this session's run id and
checked for leftovers), the real tokenizer, the scripted CPU policy and the adapter bound on the
Docker bridge gateway, as in production."""

from __future__ import annotations

import uuid

import pytest
from support import BASE_IMAGE
from support.rollout_helpers import containers

from coding_agent_rl.sandbox import create_sandbox

IMAGE = BASE_IMAGE
RUN_ID = f"harness-tests-{uuid.uuid4().hex[:8]}"


def leftover_containers() -> list[str]:
    return containers(RUN_ID)


@pytest.fixture
async def sandbox():
    """A fresh container on the default bridge (the agent needs the adapter)."""
    async with create_sandbox("docker", IMAGE, network="bridge", run_id=RUN_ID) as sb:
        yield sb
    assert leftover_containers() == [], "a sandbox container was left behind"


@pytest.fixture
async def offline_sandbox():
    """A fresh container with no network at all."""
    async with create_sandbox("docker", IMAGE, network="none", run_id=RUN_ID) as sb:
        yield sb
    assert leftover_containers() == [], "a sandbox container was left behind"


@pytest.fixture
async def stack(renderer):
    """``start(script, **adapter_config)`` -> (adapter, URL as a sandbox sees it)."""
    from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
    from coding_agent_rl.policy.scripted import ScriptedPolicy
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.sandbox.docker import DockerSandbox

    started: list = []

    async def start(script: dict, **config):
        policy = PolicyServer(ScriptedPolicy(script), renderer.tokenizer, "qwen25")
        policy_url = await policy.start()
        started.append(policy)
        adapter = AdapterServer(
            AdapterConfig(sglang_url=policy_url, renderer=renderer, tool_parser="qwen25", **config)
        )
        # Bound on the bridge gateway, not 0.0.0.0: exactly what sandboxes reach.
        url = await adapter.start(DockerSandbox.adapter_bind_host(), 0)
        started.append(adapter)
        return adapter, url

    yield start
    for server in reversed(started):
        await server.stop()
