"""Codex (npm ``@openai/codex``): a static musl binary; speaks only the Responses API."""

from __future__ import annotations

import json

from coding_agent_rl.harness.base import BaseHarness
from coding_agent_rl.harness.cache import NpmPackage
from coding_agent_rl.harness.capabilities import Capabilities
from coding_agent_rl.harness.context import HarnessContext

KEY_ENV = "CODING_AGENT_RL_SESSION"  # the provider's env_key: Codex sends it as the Bearer token


class Codex(BaseHarness):
    name = "codex"
    package = NpmPackage(
        name="@openai/codex",
        version="0.171.0-linux-x64",  # the platform build is a version of the same package
        integrity="sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw==",
        files={
            "package/vendor/x86_64-unknown-linux-musl/bin/codex": "codex",
            # The npm launcher puts ripgrep on PATH for the agent's searches.
            "package/vendor/x86_64-unknown-linux-musl/codex-path/rg": "rg",
        },
        tarball_env="SLIME_AGENT_CODEX_TARBALL",
    )
    capabilities = Capabilities(
        wire="OpenAI Responses",
        subagents="multi-agent tools (a namespace, flattened); their chains are not labelled "
        "`subagent`",
        compaction="auto compaction -> `wipe` sample (generic rule; untested)",
        images="`input_image` parts (`view_image`)",
        resume="`codex exec resume` (unused)",
        approval="`--dangerously-bypass-approvals-and-sandbox`",
        quirks="Responses only; `apply_patch` is a freeform custom tool; refuses `rm -f`",
    )
    extra_args_env = "SLIME_AGENT_CODEX_EXTRA_ARGS"
    extra_env_env = "SLIME_AGENT_CODEX_EXTRA_ENVS"

    def codex_home(self, ctx: HarnessContext) -> str:
        # Not under TMPDIR: Codex refuses to set up its own sandbox there.
        return f"{ctx.agent_home}/.codex"

    def config_files(self, ctx: HarnessContext) -> dict[str, str]:
        s = json.dumps  # a JSON string literal is a valid TOML basic string
        toml = (
            f"model = {s(ctx.model)}\n"
            'model_provider = "adapter"\n'
            "\n[model_providers.adapter]\n"
            'name = "coding-agent-rl adapter"\n'
            f"base_url = {s(ctx.adapter_url + '/v1')}\n"
            f'env_key = "{KEY_ENV}"\n'
            'wire_api = "responses"\n'  # "chat" is rejected by current versions
            # Offline: without these it looks up github.com and chatgpt.com.
            "\n[analytics]\nenabled = false\n"
            "\n[features]\nplugins = false\n"
        )
        return {f"{self.codex_home(ctx)}/config.toml": toml}

    def env(self, ctx: HarnessContext) -> dict[str, str]:
        return {"CODEX_HOME": self.codex_home(ctx), KEY_ENV: ctx.session_id}

    def argv(self, ctx: HarnessContext, prompt: str) -> list[str]:
        return [
            self.binary,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            prompt,
        ]
