"""``replay`` — applies each session's registered gold patch through the agent's shell tool.

The rollout runner registers ``{"patch": ..., "workdir": ...}`` per session (``POST
/policy/sessions/{sid}`` or :meth:`ReplayPolicy.register`). The patch travels base64-encoded in
chunks small enough for one command-line argument (Linux caps a single argument at 128 KiB),
is written to a temp file outside the work tree (so it never shows up in the agent's diff), then
applied with ``git apply``, falling back to ``patch -p1``.
"""

from __future__ import annotations

import base64
import secrets
import shlex
import threading
from typing import Any

from coding_agent_rl.policy.base import GenerateRequest, PolicyEnv, Prompt, TextPolicy
from coding_agent_rl.policy.shell import shell_text

CHUNK = 48 * 1024  # base64 characters per command
DONE = "I applied the reference patch. The task is complete."
NO_PATCH = "No patch was registered for this session, so there is nothing to apply."


def patch_commands(patch: str, workdir: str) -> list[str]:
    """Shell commands that recreate ``patch`` in a temp file and apply it in ``workdir``."""
    tag = secrets.token_hex(6)
    b64_path, patch_path = f"/tmp/.carl-replay-{tag}.b64", f"/tmp/.carl-replay-{tag}.patch"
    encoded = base64.b64encode(patch.encode()).decode()
    commands = [
        f"printf %s {shlex.quote(encoded[i : i + CHUNK])} >> {b64_path}"
        for i in range(0, len(encoded), CHUNK)
    ] or [f": > {b64_path}"]
    wd, pp = shlex.quote(workdir), patch_path
    commands.append(
        f"base64 -d {b64_path} > {pp} && cd {wd} && "
        f"(git apply --whitespace=nowarn {pp} || patch --batch -p1 < {pp}) && "
        # The temp files stay in /tmp (never in the diff): Codex refuses `rm -f` commands.
        "echo REPLAY_APPLIED"
    )
    return commands


class ReplayPolicy(TextPolicy):
    name = "replay"

    def __init__(self) -> None:
        self._pending: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def register(self, sid: str, **data: Any) -> None:
        patch, workdir = data.get("patch"), data.get("workdir")
        if not isinstance(patch, str) or not isinstance(workdir, str) or not workdir:
            raise ValueError("register needs 'patch' (str) and 'workdir' (str)")
        with self._lock:
            self._pending[sid] = patch_commands(patch, workdir)

    def reply_text(self, request: GenerateRequest, prompt: Prompt, env: PolicyEnv) -> str:
        with self._lock:
            queue = self._pending.get(request.session)
            command = queue.pop(0) if queue else None
            registered = queue is not None
        if command is not None:
            return shell_text(prompt, command, env)
        return DONE if registered else NO_PATCH
