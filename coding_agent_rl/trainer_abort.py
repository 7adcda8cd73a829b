"""The trainer's end-of-step abort, as slime signals it: ``GenerateState(args).aborted`` becomes
True, SGLang is drained, and slime then *waits* for every pending rollout (it never cancels
them). A rollout polls the flag (:func:`slime_abort_flag`) at every stage through
:func:`until_stopped`: when it turns, the rollout's work is cancelled (its sandboxes destroyed
on the way out) and the caller returns an aborted placeholder.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from coding_agent_rl.errors import RolloutAborted

T = TypeVar("T")
StopCheck = Callable[[], "str | None"]

POLL_S = 0.05  # how often a rollout looks at the flag
SLIME_ROLLOUT = "slime.rollout.sglang_rollout"
REASON = "the trainer aborted the rollout step (slime's GenerateState.aborted)"


def slime_abort_flag(args: Any) -> StopCheck | None:
    """``args``' slime generate state's abort flag as a check (the reason once set, else None);
    None when slime's rollout module is not loaded in this process (nothing is imported here)."""
    mod = sys.modules.get(SLIME_ROLLOUT)
    state_cls = getattr(mod, "GenerateState", None)
    if state_cls is None:
        return None
    try:
        state = state_cls(args)  # slime's per-process singleton (its generate_and_rm made it)
    except Exception:  # an args namespace slime cannot build a state from: no flag to poll
        return None
    return lambda: REASON if getattr(state, "aborted", False) else None


async def until_stopped(work: Awaitable[T], stop: StopCheck | None) -> T:
    """``work``'s result, unless ``stop()`` names a reason first: then ``work`` is cancelled,
    awaited (its clean-up runs) and :class:`RolloutAborted` raised. Cancelling this cancels and
    awaits ``work`` too."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            if stop is not None and (why := stop()) is not None:
                raise RolloutAborted(why)
            done, _ = await asyncio.wait({task}, timeout=POLL_S)
            if done:
                return task.result()
    finally:
        task.cancel()  # a no-op once it is done
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # seen (raised above when it mattered)
