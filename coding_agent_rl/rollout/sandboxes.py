"""Where the pipeline gets its agent sandboxes: the one place a pool plugs in."""

from __future__ import annotations

from typing import Any, Protocol

from coding_agent_rl.sandbox import Sandbox, admission, create_sandbox


class SandboxSource(Protocol):
    async def acquire(self, backend: str, image: str, options: dict[str, Any]) -> Sandbox:
        """A started sandbox (destroyed by the source when its start fails)."""
        ...

    async def release(self, sb: Sandbox) -> None: ...


class FreshSandboxes:
    """A new sandbox per rollout, destroyed after it; started through admission control (its
    per-attempt timeout and retries, :func:`~coding_agent_rl.sandbox.admission.start`)."""

    async def acquire(self, backend: str, image: str, options: dict[str, Any]) -> Sandbox:
        return await admission.start(lambda: create_sandbox(backend, image, **options))

    async def release(self, sb: Sandbox) -> None:
        await sb.close()
