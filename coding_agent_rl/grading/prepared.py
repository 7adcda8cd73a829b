"""A grading sandbox brought to its base state before the agent's diff exists.

Everything grading does before it needs the diff — create the sandbox from the task's image with
the network off, run ``pre_commands``, snapshot the base commit, set up the unprivileged test
user, upload the hidden test patch — depends on the row alone. :class:`GradingSandbox` starts
that in the background (e.g. while the agent runs) and hands the result to
``grade(..., sandbox=...)``, which takes only the diff from the agent's side.

Usage (the rollout runner's)::

    async with GradingSandbox(row, backend="docker") as ahead:
        ahead.start()                   # creation and preparation begin
        ...                             # the agent runs, the diff is captured
        result = await grade(row, diff, sandbox=ahead)   # grades; leaving destroys it

``close()`` (and leaving the ``async with``) cancels a preparation under way and destroys the
sandbox on every path, cancellation included; a failed preparation surfaces when ``grade``
waits for it and is scored as an infrastructure failure, as it always was.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shlex
import time
from typing import TYPE_CHECKING, Any

from coding_agent_rl.grading.runner import TestRunner
from coding_agent_rl.grading.workspace import (
    SNAPSHOT_ENV,
    list_script,
    parse_base,
    parse_list,
    prepare_script,
    run_checked,
)
from coding_agent_rl.sandbox import BACKENDS, Sandbox, create_sandbox
from coding_agent_rl.sandbox.base import NetworkUnsupported
from coding_agent_rl.sandbox.task import task_options

if TYPE_CHECKING:  # the schema imports grading.patchfiles; avoid the cycle at runtime
    from coding_agent_rl.datasets.schema import TaskRow


def grading_network(backend: str) -> str:
    """``"none"``, or why a grading sandbox of ``backend`` keeps its network (for the record)."""
    try:
        BACKENDS.load(backend).network_options("none")
    except NetworkUnsupported as e:
        return f"on ({e})"
    return "none"


def sandbox_options_for(
    backend: str, options: dict[str, Any] | None, row: TaskRow | None = None
) -> dict[str, Any]:
    """``options`` with the network off (where the backend can: :func:`grading_network`) and,
    given the ``row``, its resource limits and its workdir on the capped disk."""
    opts = dict(options or {})
    with contextlib.suppress(NetworkUnsupported):  # the rollout record says so
        # whatever network the agent's sandboxes were given
        opts.update(BACKENDS.load(backend).network_options("none"))
    if row is not None:
        opts = task_options(backend, opts, resources=row.resources, writable=[row.workdir])
    return opts


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A grading sandbox at the task's base, before the agent's diff went in."""

    sb: Sandbox
    runner: TestRunner
    base: str  # the snapshot commit (the same id as in the agent sandbox)
    before: frozenset[str]  # paths that differ from HEAD before the diff is applied
    test_diff: str | None  # where the hidden test patch was uploaded

    @property
    def before_file(self) -> str:
        """``before`` in the sandbox, NUL-separated (see :func:`list_script`)."""
        return f"{self.runner.dir}/before.z"


async def prepare_grading(sb: Sandbox, row: TaskRow) -> Prepared:
    """Upload the test patch, then one exec: pre_commands, snapshot, test user, the base list."""
    runner = TestRunner(sb, row.workdir)
    test_diff = None
    if row.test_patch:
        test_diff = f"{runner.dir}/test.diff"
        await sb.write_file(test_diff, row.test_patch.encode(), mode=0o644)
    r = await run_checked(
        sb,
        prepare_script(row)
        + runner.setup_script()
        + f"cd {shlex.quote(row.workdir)}\n"
        + list_script("HEAD", save=f"{runner.dir}/before.z"),
        "preparing the grading sandbox",
        env=SNAPSHOT_ENV,
    )
    runner.parse_setup(r.stdout)
    return Prepared(sb, runner, parse_base(r.stdout), frozenset(parse_list(r.stdout)), test_diff)


class GradingSandbox:
    """One clean grading sandbox for ``row``, prepared ahead; it grades exactly one diff."""

    def __init__(
        self,
        row: TaskRow,
        *,
        backend: str = "docker",
        sandbox_options: dict[str, Any] | None = None,
    ):
        self.row = row
        self.sandbox = create_sandbox(
            backend, image=row.image, **sandbox_options_for(backend, sandbox_options, row)
        )
        self.used = False
        self.ready_at: float | None = None  # time.monotonic() when the preparation finished
        self.prepare_s: float | None = None  # how long it took (creation included)
        self._task: asyncio.Future[Prepared] | None = None

    def start(self) -> GradingSandbox:
        """Begin creating and preparing the sandbox in the background (once)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._prepare())
        return self

    async def _prepare(self) -> Prepared:
        t0 = time.monotonic()
        await self.sandbox.__aenter__()
        prepared = await prepare_grading(self.sandbox, self.row)
        self.ready_at = time.monotonic()
        self.prepare_s = self.ready_at - t0
        return prepared

    async def ready(self) -> Prepared:
        """The prepared sandbox (starting it if needed); raises what the preparation raised."""
        self.start()
        assert self._task is not None
        return await self._task

    async def close(self) -> None:
        """Destroy the sandbox; idempotent and safe under cancellation."""
        await asyncio.shield(self._close())

    async def _close(self) -> None:
        if self._task is not None:
            self._task.cancel()  # a no-op once it is done
            await asyncio.wait([self._task])
            if not self._task.cancelled():
                self._task.exception()  # retrieved: a failure was reported (or is moot)
        await self.sandbox.close()

    async def __aenter__(self) -> GradingSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
