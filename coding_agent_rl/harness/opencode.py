"""opencode (npm ``opencode-ai``): a self-contained Bun binary; speaks OpenAI Chat Completions."""

from __future__ import annotations

import json

from coding_agent_rl.harness.base import BaseHarness
from coding_agent_rl.harness.cache import NpmPackage
from coding_agent_rl.harness.capabilities import Capabilities
from coding_agent_rl.harness.context import HarnessContext


class OpenCode(BaseHarness):
    name = "opencode"
    package = NpmPackage(
        name="opencode-linux-x64",  # the optional dependency of opencode-ai holding the binary
        version="1.18.33",
        integrity="sha512-q/t/3p2CTxOT9y2kvjesb/LZab2+1eqlhhWA02Be6mjTtmYtNBcBsrI5yDo4Fw7ZSPBW2oyMIGMNRqiKQjiAWw==",
        files={"package/bin/opencode": "opencode"},
        tarball_env="SLIME_AGENT_OPENCODE_TARBALL",
    )
    capabilities = Capabilities(
        wire="OpenAI Chat",
        subagents="`task` tool; its chains are not labelled `subagent`",
        compaction="auto summary -> `wipe` sample (generic rule; untested)",
        images="not tested here",
        resume="`--continue` / `--session` (unused)",
        approval='config `"permission": {"*": "allow"}`',
        quirks="fixed `--title` (no title side request); slow first request (~10-20 s loaded)",
    )
    extra_args_env = "SLIME_AGENT_OPENCODE_EXTRA_ARGS"
    extra_env_env = "SLIME_AGENT_OPENCODE_EXTRA_ENVS"

    def config_path(self, ctx: HarnessContext) -> str:
        # Outside the workdir: an opencode.json in the repo would end up in the diff.
        return f"{ctx.agent_home}/.config/opencode/opencode.json"

    def config_files(self, ctx: HarnessContext) -> dict[str, str]:
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "adapter": {
                    # Bundled in the binary: no package install at run time.
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "coding-agent-rl adapter",
                    "options": {"baseURL": ctx.adapter_url + "/v1", "apiKey": ctx.session_id},
                    "models": {ctx.model: {"name": ctx.model}},
                }
            },
            "model": f"adapter/{ctx.model}",
            "small_model": f"adapter/{ctx.model}",
            "autoupdate": False,
            "share": "disabled",
            "permission": {"*": "allow"},
        }
        return {self.config_path(ctx): json.dumps(config, indent=1)}

    def env(self, ctx: HarnessContext) -> dict[str, str]:
        return {
            "OPENCODE_CONFIG": self.config_path(ctx),
            # Offline: no models.dev catalogue, no self-update, no language-server downloads.
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        }

    def argv(self, ctx: HarnessContext, prompt: str) -> list[str]:
        # A fixed --title skips the title-generation side request to the model.
        return [
            self.binary,
            "run",
            "--format",
            "json",
            "--title",
            ctx.tag,
            "-m",
            f"adapter/{ctx.model}",
            prompt,
        ]
