"""A prepared sandbox, frozen: fresh, independent copies start from it (``Sandbox.snapshot``).

A copy starts with the snapshot's files and nothing else: no process, no file written after
the snapshot, nothing another copy writes. The snapshot is owner-labelled like any sandbox (a
dead run's are reaped) and removed by :meth:`Snapshot.remove` once its copies are gone.
"""

from __future__ import annotations

import abc
import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coding_agent_rl.sandbox.base import Sandbox


class Snapshot(abc.ABC):
    """What a backend's :meth:`Sandbox.snapshot` returns."""

    backend: str = "?"

    @abc.abstractmethod
    async def copy(self) -> Sandbox:
        """One fresh copy, started (the caller closes it)."""

    async def copies(self, n: int) -> list[Sandbox]:
        """``n`` fresh copies, started together; all or none (a failure closes the others)."""
        results = await asyncio.gather(*(self.copy() for _ in range(n)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(r.close() for r in results if not isinstance(r, BaseException)))
            raise errors[0]
        return [r for r in results if not isinstance(r, BaseException)]

    @abc.abstractmethod
    async def remove(self) -> None:
        """Remove the snapshot (idempotent); its copies must be closed first."""
