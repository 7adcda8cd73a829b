"""A prepared sandbox, frozen: fresh, independent copies start from it (``Sandbox.snapshot``).

A copy starts with the snapshot's files and nothing else: no process, no file written after
the snapshot, nothing another copy writes. The snapshot is owner-labelled like any sandbox (a
dead run's are reaped) and removed by :meth:`Snapshot.remove` once its copies are gone.
"""

from __future__ import annotations

import abc
import asyncio
from typing import TYPE_CHECKING

from coding_agent_rl.errors import SandboxError

if TYPE_CHECKING:
    from coding_agent_rl.sandbox.base import Sandbox


class Snapshot(abc.ABC):
    """What a backend's :meth:`Sandbox.snapshot` returns; a backend implements :meth:`_copy`
    and :meth:`_remove` (a removed snapshot refuses copies with :class:`SandboxError`)."""

    backend: str = "?"
    name: str = "?"  # what the errors call it
    _removed: bool = False

    @abc.abstractmethod
    async def _copy(self) -> Sandbox: ...

    @abc.abstractmethod
    async def _remove(self) -> None: ...

    def _check_live(self) -> None:
        if self._removed:
            raise SandboxError(f"{self.backend} snapshot {self.name} was removed")

    async def copy(self) -> Sandbox:
        """One fresh copy, started (the caller closes it)."""
        self._check_live()
        return await self._copy()

    async def copies(self, n: int) -> list[Sandbox]:
        """``n`` fresh copies, started together; all or none (a failure closes the others)."""
        self._check_live()
        results = await asyncio.gather(*(self.copy() for _ in range(n)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(r.close() for r in results if not isinstance(r, BaseException)))
            raise errors[0]
        return [r for r in results if not isinstance(r, BaseException)]

    async def remove(self) -> None:
        """Remove the snapshot (idempotent); its copies must be closed first."""
        if not self._removed:
            self._removed = True
            await self._remove()
