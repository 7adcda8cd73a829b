"""Fixtures for the adapter tests: the real tokenizer, a CPU policy server, the adapter, and the
real agent CLI binaries (unpacked from the cached npm tarballs; fetched with `npm pack` when the
cache is empty; a missing binary FAILS the test, it never skips)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.policy.server import PolicyServer

CACHE = Path(os.environ.get("CODING_AGENT_RL_CACHE", "~/.cache/coding-agent-rl")).expanduser()
AGENTS = {
    # name: (npm spec, tarball name, binary path inside the package)
    "claude": (
        "@anthropic-ai/claude-code-linux-x64@2.1.332",
        "anthropic-ai-claude-code-linux-x64-2.1.332.tgz",
        "package/claude",
    ),
    "codex": (
        "@openai/codex@0.171.0-linux-x64",
        "openai-codex-0.171.0-linux-x64.tgz",
        "package/vendor/x86_64-unknown-linux-musl/bin/codex",
    ),
}


def agent_binary(name: str) -> Path:
    spec, tarball_name, inner = AGENTS[name]
    agents = CACHE / "agents"
    tarball = agents / tarball_name
    # Not "unpacked/": that layout belongs to coding_agent_rl.harness.cache.
    unpacked = agents / "test-unpacked" / tarball_name.removesuffix(".tgz")
    binary = unpacked / inner
    if binary.is_file():
        return binary
    if not tarball.is_file():
        agents.mkdir(parents=True, exist_ok=True)
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(f"{tarball} is not cached and npm is missing to fetch {spec}")
        r = subprocess.run(
            [npm, "pack", spec, "--pack-destination", str(agents)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0 or not tarball.is_file():
            pytest.fail(f"npm pack {spec} failed: {r.stderr[-2000:]}")
    tmp = unpacked.with_name(unpacked.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp, filter="tar")
    try:
        tmp.rename(unpacked)
    except OSError:  # a concurrent run unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return binary


@pytest.fixture(scope="session")
def claude_binary() -> Path:
    return agent_binary("claude")


@pytest.fixture(scope="session")
def codex_binary() -> Path:
    return agent_binary("codex")


@pytest.fixture
async def scripted_stack(renderer):
    """``start(script, **config)`` -> (adapter, policy server, adapter base URL)."""
    started: list = []

    async def start(script: dict, tool_parser: str = "qwen25", **config):
        policy = PolicyServer(ScriptedPolicy(script), renderer.tokenizer, tool_parser)
        policy_url = await policy.start()
        started.append(policy)
        adapter = AdapterServer(
            AdapterConfig(
                sglang_url=policy_url, renderer=renderer, tool_parser=tool_parser, **config
            )
        )
        url = await adapter.start()
        started.append(adapter)
        return adapter, policy, url

    yield start
    for server in reversed(started):
        await server.stop()
