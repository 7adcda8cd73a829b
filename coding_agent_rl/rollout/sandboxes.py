"""Where the pipeline gets its agent sandboxes: the one place a pool plugs in."""

from __future__ import annotations

from typing import Any, Protocol

from coding_agent_rl.sandbox import Sandbox, create_sandbox


class SandboxSource(Protocol):
    async def acquire(self, backend: str, image: str, options: dict[str, Any]) -> Sandbox:
        """A started sandbox (destroyed by the source when its start fails)."""
        ...

    async def release(self, sb: Sandbox) -> None: ...


class FreshSandboxes:
    """A new sandbox per rollout, destroyed after it."""

    async def acquire(self, backend: str, image: str, options: dict[str, Any]) -> Sandbox:
        sb = create_sandbox(backend, image, **options)
        await sb.__aenter__()  # destroys what it created when it fails or is cancelled
        return sb

    async def release(self, sb: Sandbox) -> None:
        await sb.close()
