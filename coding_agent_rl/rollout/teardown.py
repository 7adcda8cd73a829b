"""Teardown steps, each in its own guard: one failing never skips the others."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)


async def guarded(step: str, fn: Callable[[], Any], failed: list[str], where: str = "") -> None:
    """Run ``fn()`` (awaiting what it returns); a failure is logged and appended to ``failed``."""
    try:
        result = fn()
        if isinstance(result, Awaitable):
            await result
    except Exception as e:
        log.warning("teardown %s failed%s: %s: %s", step, f" ({where})" if where else "",
                    type(e).__name__, e)  # fmt: skip
        failed.append(step)
