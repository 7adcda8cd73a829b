"""Run a long command detached inside any sandbox and notice its end quickly.

The command runs in the background as the leader of its own session; when it ends, its exit
code is written to a *marker file* with write-then-rename, so a reader never sees half of it.
:func:`wait_detached` then blocks inside the sandbox in a short poll loop (``[ -e marker ]``
every ``poll_s``) split into bounded slices, so the time from exit to notice is about
``poll_s / 2`` plus one exec round trip, and a dropped connection or a retried exec (the wait
is idempotent) costs nothing. Only ``Sandbox.exec`` is used: it works on every backend.
"""

from __future__ import annotations

import shlex
import time

from coding_agent_rl.sandbox.base import Sandbox, SandboxError

_SLICE_S = 300.0  # one wait exec never blocks longer than this
_NOT_YET = 99


async def start_detached(
    sb: Sandbox,
    cmd: str,
    *,
    marker: str,
    log: str = "/dev/null",
    user: str = "root",
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> None:
    """Start ``cmd`` (``bash -c``) in the background; its exit code lands in ``marker``.

    Output goes to ``log`` (a file inside the sandbox). Returns as soon as it started.
    """
    q_marker = shlex.quote(marker)
    tmp = shlex.quote(f"{marker}.tmp")
    body = f"bash -c {shlex.quote(cmd)}; printf '%s\\n' \"$?\" > {tmp} && mv -f {tmp} {q_marker}"
    launcher = (
        f"rm -f {q_marker} {tmp}; "
        f"setsid nohup bash -c {shlex.quote(body)} > {shlex.quote(log)} 2>&1 < /dev/null & "
        "echo $!"
    )
    result = await sb.exec(launcher, user=user, env=env, cwd=cwd, timeout=60, idempotent=False)
    if result.exit_code != 0:
        raise SandboxError(f"could not start detached command: {result.stderr.strip()}")


async def wait_detached(
    sb: Sandbox,
    marker: str,
    *,
    timeout: float,
    poll_s: float = 0.05,
) -> int | None:
    """The detached command's exit code, or None if it has not ended within ``timeout``."""
    deadline = time.monotonic() + timeout
    q_marker = shlex.quote(marker)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        slice_s = min(left, _SLICE_S)
        # SECONDS is bash's whole-second clock; the exec timeout below backs it up.
        script = (
            f"end=$((SECONDS + {max(1, int(slice_s))})); "
            f"while [ ! -e {q_marker} ]; do "
            f"[ $SECONDS -ge $end ] && exit {_NOT_YET}; sleep {poll_s}; done; cat {q_marker}"
        )
        result = await sb.exec(script, timeout=slice_s + 5, idempotent=True)
        if result.exit_code == 0:
            try:
                return int(result.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise SandboxError(f"unreadable marker {marker}: {result.stdout!r}") from None
        if result.exit_code != _NOT_YET and not result.timed_out:
            raise SandboxError(f"waiting for {marker} failed: {result.stderr.strip()}")
