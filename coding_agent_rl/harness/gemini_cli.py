"""Gemini CLI (npm ``@google/gemini-cli``): a Node.js bundle; speaks Gemini's generateContent.

The package is a folder of JavaScript chunks, run by the pinned Node.js binary (``node.py``), so
the task image needs no Node.js of its own.
"""

from __future__ import annotations

from coding_agent_rl.harness.cache import NpmPackage
from coding_agent_rl.harness.capabilities import Capabilities
from coding_agent_rl.harness.context import HarnessContext
from coding_agent_rl.harness.node import GeminiStyleHarness


class GeminiCli(GeminiStyleHarness):
    name = "gemini_cli"
    package = NpmPackage(
        name="@google/gemini-cli",
        version="0.61.0",
        integrity="sha512-dbQ9A0qBtFJNi6XBkHvfZ6Azpn6PNgH/P8h2MZ67RLlX8hSAVjup39CRWqdRxZv7YXIuhrFaytr8y0jKnkoxnQ==",
        files={"package/bundle/": "gemini-cli"},
        command="gemini-cli/gemini.js",
        tarball_env="SLIME_AGENT_GEMINI_TARBALL",
    )
    capabilities = Capabilities(
        wire="Gemini generateContent (SSE)",
        subagents="`invoke_agent` tool -> `subagent` samples (by its `prompt` argument)",
        compaction="chat compression -> `wipe` sample (generic rule; untested)",
        images="`inlineData` parts (also inside a `functionResponse`)",
        resume="`--resume` (unused)",
        approval="`--approval-mode yolo`, folder trust off",
        quirks="ignores `x-should-retry` (refusals say `limit: 0`); drops thought parts from "
        "its history; Node.js from npm",
    )
    extra_args_env = "SLIME_AGENT_GEMINI_EXTRA_ARGS"
    extra_env_env = "SLIME_AGENT_GEMINI_EXTRA_ENVS"
    settings_dir = ".gemini"
    # The API-key path of the SDK: the session id goes out as ``x-goog-api-key``.
    auth_type = "gemini-api-key"

    def env(self, ctx: HarnessContext) -> dict[str, str]:
        return {
            "GOOGLE_GEMINI_BASE_URL": ctx.adapter_url,  # the SDK appends /v1beta/models/...
            "GEMINI_API_KEY": ctx.session_id,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            # One process: no relaunch of itself with a larger heap.
            "GEMINI_CLI_NO_RELAUNCH": "1",
            "GEMINI_SANDBOX": "false",
            "NO_BROWSER": "1",
        }
