"""Qwen Code (npm ``@qwen-code/qwen-code``): a Node.js bundle; speaks OpenAI Chat Completions.

Run by the pinned Node.js binary (``node.py``); the task image needs no Node.js of its own.
Quirk: it refuses a shell ``sed -i`` / ``perl -i`` on a file it has not read in the session.
"""

from __future__ import annotations

from coding_agent_rl.harness.cache import NpmPackage
from coding_agent_rl.harness.capabilities import Capabilities
from coding_agent_rl.harness.context import HarnessContext
from coding_agent_rl.harness.node import GeminiStyleHarness


class QwenCode(GeminiStyleHarness):  # a fork of Gemini CLI
    name = "qwen_code"
    package = NpmPackage(
        name="@qwen-code/qwen-code",
        version="0.24.4",
        integrity="sha512-pmexy/Nj+BKd3Un1ogqGQE8V4GJn5B6N9PQOrU1GH+lMR29kn6Bgf6YdbZa8hNIoTmAKT1LTPK+P8TibZRPPVg==",
        files={"package/": "qwen-code"},
        command="qwen-code/cli.js",
        tarball_env="SLIME_AGENT_QWEN_TARBALL",
    )
    capabilities = Capabilities(
        wire="OpenAI Chat",
        subagents="`agent` tool; its chains are not labelled `subagent`",
        compaction="chat compression -> `wipe` sample (generic rule; untested)",
        images="not tested here",
        resume="`--resume` / `--continue` (unused)",
        approval="`--approval-mode yolo`",
        quirks="refuses `sed -i` / `perl -i` on a file it has not read; no ripgrep (not "
        "executable in the npm tarball); Node.js from npm",
    )
    extra_args_env = "SLIME_AGENT_QWEN_EXTRA_ARGS"
    extra_env_env = "SLIME_AGENT_QWEN_EXTRA_ENVS"
    settings_dir = ".qwen"
    auth_type = "openai"

    def env(self, ctx: HarnessContext) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": ctx.adapter_url + "/v1",
            "OPENAI_API_KEY": ctx.session_id,  # sent as "Authorization: Bearer <sid>"
            "OPENAI_MODEL": ctx.model,
            # One process: no relaunch of itself with a larger heap.
            "QWEN_CODE_NO_RELAUNCH": "1",
            "QWEN_SANDBOX": "false",
            "NO_BROWSER": "1",
        }
