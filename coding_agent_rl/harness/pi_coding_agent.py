"""pi (npm ``@mariozechner/pi-coding-agent``): a Node.js CLI; speaks OpenAI Chat Completions.

Not a bundle: its ~190 npm dependencies are pinned by ``locks/pi-coding-agent.json`` and
installed with it (``npm ci``, no install scripts, no optional packages); the pinned Node.js
binary (``node.py``) runs it. Its four tools (read, bash, edit, write) need no permission.
"""

from __future__ import annotations

import json

from coding_agent_rl.harness.cache import NpmPackage
from coding_agent_rl.harness.capabilities import Capabilities
from coding_agent_rl.harness.context import HarnessContext
from coding_agent_rl.harness.node import NodeHarness


class PiCodingAgent(NodeHarness):
    name = "pi"
    package = NpmPackage(
        name="@mariozechner/pi-coding-agent",
        version="0.73.1",
        integrity="sha512-gXQh3SaZmWTfVMc4Ao5+LGbVeKvzyO7tolok0nLsZgq9nGjZx/EEU3NM8C+qUnB4Nvs2rswG5qOVgLzQkq0fHQ==",
        files={"package/": "pi"},
        command="pi/node_modules/@mariozechner/pi-coding-agent/dist/cli.js",
        tarball_env="SLIME_AGENT_PI_TARBALL",
        lock="pi-coding-agent.json",
    )
    capabilities = Capabilities(
        wire="OpenAI Chat",
        subagents="none (by design)",
        compaction="auto-compaction -> `wipe` sample (generic rule; untested)",
        images="not tested here",
        resume="`--continue` / `--resume` / `--session` (unused)",
        approval="none to switch off: no permission prompts",
        quirks="not a bundle: ~190 npm packages (pinned by a lock file, 113 MB); Node.js "
        "from npm; system prompt as `system` (no `developer` role), no `reasoning_effort`",
    )
    extra_args_env = "SLIME_AGENT_PI_EXTRA_ARGS"
    extra_env_env = "SLIME_AGENT_PI_EXTRA_ENVS"

    def config_dir(self, ctx: HarnessContext) -> str:
        return f"{ctx.agent_home}/.pi/agent"

    def config_files(self, ctx: HarnessContext) -> dict[str, str]:
        models = {
            "providers": {
                "adapter": {
                    "baseUrl": ctx.adapter_url + "/v1",
                    "api": "openai-completions",
                    "apiKey": ctx.session_id,  # sent as "Authorization: Bearer <sid>"
                    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                    "models": [{"id": ctx.model}],
                }
            }
        }
        settings = {
            "defaultProvider": "adapter",
            "defaultModel": ctx.model,
            "quietStartup": True,
            "enableInstallTelemetry": False,
        }
        home = self.config_dir(ctx)
        return {
            f"{home}/models.json": json.dumps(models, indent=1),
            f"{home}/settings.json": json.dumps(settings, indent=1),
        }

    def env(self, ctx: HarnessContext) -> dict[str, str]:
        return {
            "PI_CODING_AGENT_DIR": self.config_dir(ctx),
            # Offline: no update or package checks, no install telemetry.
            "PI_OFFLINE": "1",
            "PI_SKIP_VERSION_CHECK": "1",
            "PI_TELEMETRY": "0",
        }

    def argv(self, ctx: HarnessContext, prompt: str) -> list[str]:
        return self.node_argv(
            "--print", "--mode", "json", "--provider", "adapter", "--model", ctx.model, prompt
        )
