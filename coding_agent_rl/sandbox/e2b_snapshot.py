"""E2B snapshots: the SDK's ``AsyncSandbox.fork(timeout=, count=)`` (the prepared sandbox is
checkpointed in place, memory included, and ``count`` sandboxes boot from that checkpoint; at
most :data:`MAX_FORK` per call). The prepared sandbox stays alive while copies are made and is
killed by :meth:`E2BSnapshot.remove`; every copy has the prepared sandbox's time-to-live."""

from __future__ import annotations

from typing import Any

from coding_agent_rl.sandbox.base import Sandbox, SandboxCreateError
from coding_agent_rl.sandbox.snapshot import Snapshot

MAX_FORK = 20  # the API's bound on ``count``


class E2BSnapshot(Snapshot):
    backend = "e2b"

    def __init__(self, parent: Any, options: dict[str, Any]):
        """``parent``: the prepared E2B sandbox (its class adopts the forks)."""
        self.parent = parent
        self.options = options
        self.name = f"of {parent.sandbox_id}"

    async def _copy(self) -> Sandbox:
        return (await self.copies(1))[0]

    async def copies(self, n: int) -> list[Sandbox]:
        self._check_live()
        handle = self.parent.handle
        out: list[Sandbox] = []
        try:
            while len(out) < n:
                count = min(MAX_FORK, n - len(out))
                forks = await handle.fork(timeout=self.parent.lifetime_s, count=count)
                adopted = [
                    type(self.parent).adopt(self.parent.image, f, self.options)
                    for f in forks
                    if not isinstance(f, BaseException)
                ]
                out += adopted
                failed = [f for f in forks if isinstance(f, BaseException)]
                if failed:
                    raise SandboxCreateError(f"e2b: fork failed: {failed[0]}") from failed[0]
        except BaseException:
            for sb in out:
                await sb.close()
            raise
        return out

    async def _remove(self) -> None:
        await self.parent.close()
