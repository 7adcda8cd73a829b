"""Claude Code (npm ``@anthropic-ai/claude-code``): a native binary, no Node.js needed."""

from __future__ import annotations

from coding_agent_rl.harness.base import BaseHarness
from coding_agent_rl.harness.cache import NpmPackage
from coding_agent_rl.harness.capabilities import Capabilities
from coding_agent_rl.harness.context import HarnessContext


class ClaudeCode(BaseHarness):
    name = "claude_code"
    # The npm wrapper is 20 KB; the program is the platform package's glibc binary.
    package = NpmPackage(
        name="@anthropic-ai/claude-code-linux-x64",
        version="2.1.332",
        integrity="sha512-f4JWhzwYutJIHScC7/dYOPX6s28tt7ZADhsOi8zwOHq5fFPEuUeChh2NMfinSg0GrUckYxaeebC4h0DqiKzLcw==",
        files={"package/claude": "claude"},
        tarball_env="SLIME_AGENT_CC_TARBALL",
    )
    capabilities = Capabilities(
        wire="Anthropic Messages",
        subagents="`Task` / `Agent` tool -> `subagent` samples",
        compaction="auto-compact -> `wipe` sample (the summary is trained)",
        images="`Read` of an image -> `image` block in the tool result",
        resume="`--resume` / `--continue` (unused: one fresh session per rollout)",
        approval="`--permission-mode bypassPermissions` (`IS_SANDBOX=1` as root)",
        quirks="ToolSearch off; the billing header is dropped from the system prompt",
    )
    extra_args_env = "SLIME_AGENT_CC_EXTRA_ARGS"
    extra_env_env = "SLIME_AGENT_CC_EXTRA_ENVS"

    def env(self, ctx: HarnessContext) -> dict[str, str]:
        model = ctx.model
        env = {
            # The client appends /v1/messages itself: no /v1 here.
            "ANTHROPIC_BASE_URL": ctx.adapter_url,
            "ANTHROPIC_AUTH_TOKEN": ctx.session_id,  # sent as "Authorization: Bearer <sid>"
            # Every model alias -> the policy, so side requests and subagents hit it too.
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "CLAUDE_CODE_SUBAGENT_MODEL": model,
            # Offline: no title side request, telemetry, update check or DNS lookups.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            # Newer versions hide most tools behind ToolSearch; the policy sees them all.
            "ENABLE_TOOL_SEARCH": "false",
        }
        if ctx.user == "root":
            # bypassPermissions is refused for root unless the CLI is told it is in a sandbox.
            env["IS_SANDBOX"] = "1"
        return env

    def argv(self, ctx: HarnessContext, prompt: str) -> list[str]:
        return [
            self.binary,
            "-p",
            prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "bypassPermissions",
        ]
