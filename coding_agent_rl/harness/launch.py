"""Run one command detached inside a sandbox, wait for it within a budget, leave nothing behind.

Per ``tag`` a root-owned run directory holds the launcher, a lock (a replayed launch starts
nothing), the pid, the log and the exit marker; only the command runs as ``spec.user``. Layout
and why it cannot be forged: docs/modules/harness.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import shlex
import time
from collections.abc import Mapping, Sequence

from coding_agent_rl.sandbox.base import Sandbox, SandboxError, SandboxGone
from coding_agent_rl.sandbox.reaper import TOKEN_ENV, new_token
from coding_agent_rl.sandbox.reaper import kill_command as reaper_kill_command

log = logging.getLogger(__name__)

RUN_ROOT = "/opt/coding-agent-rl/run"
POLL_S = 0.05  # the wait loop's sleep inside the sandbox: exit is seen within ~50 ms
PID_GRACE_S = 15.0  # how long the launcher may take to write its pid before we call it failed
LOG_TAIL_BYTES = 8192


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    user: str
    tag: str
    path_prefix: str = ""  # prepended to the sandbox's own PATH (images may extend PATH)
    # Marks every process of this run (the sandbox reaper's env token): kill() finds them all.
    token: str = dataclasses.field(default_factory=new_token)

    @property
    def run_dir(self) -> str:
        return f"{RUN_ROOT}/{self.tag}"

    @property
    def log_path(self) -> str:
        return f"{self.run_dir}/agent.log"


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    exit_code: int | None  # None: killed at the budget, or vanished without an exit code
    timed_out: bool
    duration_s: float
    log_path: str
    log_tail: str
    launched: bool = True  # False: this call found the tag already launched (a replay)


# Run "$@" as user $u, keeping the environment: setpriv (util-linux), else su.
_DROP = r"""u={user}
if command -v setpriv >/dev/null 2>&1; then
  drop() {{ setpriv --reuid="$(id -u "$u")" --regid="$(id -g "$u")" --init-groups -- "$@"; }}
elif command -v su >/dev/null 2>&1; then
  drop() {{ su -m -s /bin/sh "$u" -c 'exec "$0" "$@"' "$@"; }}
else
  drop() {{ echo "cannot run as $u: no setpriv or su in the image" >&2; return 126; }}
fi
"""


def launcher_script(spec: LaunchSpec) -> str:
    """The root script that runs ``spec.argv`` as ``spec.user`` in its own session and records
    the pid and the exit code (see the module docstring)."""
    q = shlex.quote
    run = q(spec.run_dir)
    exports = f'export PATH={q(spec.path_prefix)}:"$PATH"\n' if spec.path_prefix else ""
    exports += "".join(f"export {k}={q(v)}\n" for k, v in spec.env.items())
    as_root = spec.user in ("root", "0")
    return (
        "#!/bin/bash\n"
        "# written by coding-agent-rl: one agent run; its exit code goes to the marker file\n"
        f"echo $$ > {run}/pid\n"
        f"cd {q(spec.cwd)} || {{ echo {q(f'cannot cd to {spec.cwd}')} > {run}/agent.log; "
        f"echo 126 > {run}/exit.tmp; mv {run}/exit.tmp {run}/exit; exit 126; }}\n"
        + ("" if as_root else _DROP.format(user=q(spec.user)))
        + f"{exports}"
        f"{'' if as_root else 'drop '}{' '.join(q(a) for a in spec.argv)}"
        f" > {run}/agent.log 2>&1 < /dev/null\n"
        f"echo $? > {run}/exit.tmp && mv {run}/exit.tmp {run}/exit\n"
    )


def launch_command(spec: LaunchSpec) -> str:
    """Start the launcher unless this tag was already launched (``mkdir`` is atomic).

    The launcher (a session leader) carries the run's token instead of the exec's: the sandbox
    kills what an exec started when that exec fails mid-way, but the agent must outlive its
    launch; :func:`kill` finds the whole session by the run's token.
    """
    run = shlex.quote(spec.run_dir)
    token = shlex.quote(f"{TOKEN_ENV}={spec.token}")
    return (
        f"mkdir {run}/lock 2>/dev/null || {{ echo already-launched; exit 0; }}\n"
        f"env {token} setsid bash {run}/launch.sh < /dev/null > /dev/null 2>&1 &\n"
        "echo launched\n"
    )


def wait_command(spec: LaunchSpec, then: str = "") -> str:
    """Block until the launcher wrote its exit code or its process is gone (or a zombie); print
    the exit code, ``gone`` or ``nopid``. ``then`` runs afterwards, its output after a
    :data:`THEN_MARK` line."""
    run = shlex.quote(spec.run_dir)
    tries = int(PID_GRACE_S / POLL_S)
    script = (
        "nopid=\n"
        f"i=0; while [ ! -s {run}/pid ] && [ ! -e {run}/exit ]; do\n"
        f"  i=$((i+1)); [ $i -gt {tries} ] && {{ echo nopid; nopid=1; break; }}; sleep {POLL_S}\n"
        "done\n"
        'if [ -z "$nopid" ]; then\n'
        f"read -r p < {run}/pid 2>/dev/null\n"
        f"while [ ! -e {run}/exit ]; do\n"
        # /proc/PID/stat: "pid (comm) S ..."; a zombie (no reaping init) counts as gone
        "  read -r st < /proc/$p/stat 2>/dev/null || break\n"
        '  st=${st##*) }; [ "${st%% *}" = Z ] && break\n'
        f"  sleep {POLL_S}\n"
        "done\n"
        f"cat {run}/exit 2>/dev/null || echo gone\n"
        "fi\n"
    )
    return script + (f"echo {THEN_MARK}\n{then}" if then else "")


THEN_MARK = "CAR-THEN"


def _kill_script(spec: LaunchSpec) -> str:
    cmd = reaper_kill_command(spec.token) + "\n"
    if spec.user not in ("root", "0"):
        cmd += f"if command -v pkill >/dev/null; then pkill -KILL -u {shlex.quote(spec.user)}; fi\n"
    return cmd


def kill_command(spec: LaunchSpec) -> str:
    """Kill every process of the run: its session, anything carrying its token, and (for a
    dedicated non-root agent user) anything else that user still runs, e.g. a daemon that left
    the session and cleared its environment. One agent run per sandbox user at a time."""
    return _kill_script(spec) + "exit 0\n"


def _tail_script(spec: LaunchSpec, nbytes: int = LOG_TAIL_BYTES) -> str:
    return f"tail -c {nbytes} {shlex.quote(spec.log_path)} 2>/dev/null\n"


INLINE_LAUNCHER_BYTES = 64 * 1024  # a longer launcher (a huge prompt) goes through the file API


async def prepare(sb: Sandbox, spec: LaunchSpec) -> None:
    """Clear the tag's run directory (lock, pid, marker, log) and write the launcher, in one
    exec when the launcher fits on a command line (Linux caps one argument at 128 KiB).

    A previous run of the same tag that is still alive loses its process group first. The
    directory is root's (mode 755): see the module docstring.
    """
    run = shlex.quote(spec.run_dir)
    stop_old = f'if read -r p < {run}/pid 2>/dev/null; then kill -KILL -- -"$p" 2>/dev/null; fi'
    script = f"{stop_old}; rm -rf {run} && mkdir -p {run} && chown root: {run} && chmod 755 {run}"
    launcher = launcher_script(spec).encode()
    inline = len(launcher) <= INLINE_LAUNCHER_BYTES
    if inline:
        data = shlex.quote(base64.b64encode(launcher).decode())
        script += f" && printf %s {data} | base64 -d > {run}/launch.sh && chmod 755 {run}/launch.sh"
    await sb.exec(script, check=True, timeout=60)
    if not inline:
        await sb.write_file(f"{spec.run_dir}/launch.sh", launcher, mode=0o755)


async def launch(sb: Sandbox, spec: LaunchSpec) -> bool:
    """Start the prepared launcher; False when this tag had already been launched.

    Idempotent thanks to the lock: the backend may replay it after a transport failure. Runs as
    root: the launcher drops to ``spec.user`` for the command only.
    """
    res = await sb.exec(launch_command(spec), user="root", timeout=60, check=True, idempotent=True)
    return "launched" in res.stdout.split()


async def wait(sb: Sandbox, spec: LaunchSpec, deadline: float) -> tuple[str, bool]:
    """(what the wait saw, timed_out). Retries the (idempotent) wait after a transport error."""
    seen, timed_out, _ = await _wait(sb, spec, deadline, "")
    return seen, timed_out


async def _wait(sb: Sandbox, spec: LaunchSpec, deadline: float, then: str) -> tuple[str, bool, str]:
    """:func:`wait`, then the idempotent script ``then`` in the same exec: (seen, timed_out,
    the output of ``then``); ``then`` does not run when the wait timed out."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "", True, ""
        try:
            res = await sb.exec(wait_command(spec, then), timeout=remaining, idempotent=True)
        except SandboxGone:
            raise
        except SandboxError as e:
            log.warning("waiting for %s: %s; checking again", spec.tag, e)
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            continue
        if res.timed_out:
            return "", True, ""
        seen, _, after = res.stdout.partition(f"\n{THEN_MARK}\n") if then else (res.stdout, "", "")
        return seen.strip(), False, after


async def kill(sb: Sandbox, spec: LaunchSpec) -> None:
    await sb.exec(kill_command(spec), timeout=30)


async def log_tail(sb: Sandbox, spec: LaunchSpec, nbytes: int = LOG_TAIL_BYTES) -> str:
    res = await sb.exec(_tail_script(spec, nbytes), timeout=30)
    return res.stdout


async def run_detached(sb: Sandbox, spec: LaunchSpec, budget_s: float) -> LaunchResult:
    """Prepare, launch, wait within ``budget_s``; kill the whole session on overrun or exit."""
    await prepare(sb, spec)
    start = time.monotonic()
    deadline = start + budget_s
    launched = await launch(sb, spec)
    try:
        # A normal exit may leave background children: the same exec kills the whole run and
        # reads the log's tail (one round trip after the exit instead of three).
        seen, timed_out, tail = await _wait(
            sb, spec, deadline, _kill_script(spec) + _tail_script(spec)
        )
    except BaseException:  # cancelled, or the sandbox is gone: still try not to leak the agent
        with contextlib.suppress(Exception):
            await asyncio.shield(kill(sb, spec))
        raise
    duration = time.monotonic() - start
    if timed_out:  # a budget overrun: the wait exec was cut short, nothing was killed yet
        await kill(sb, spec)
    exit_code = int(seen) if seen.lstrip("-").isdigit() else None
    if seen in ("nopid", "gone"):
        log.warning("agent %s ended without an exit code (%s)", spec.tag, seen)
    if timed_out:  # the marker may have landed just before the kill
        res = await sb.exec(f"cat {shlex.quote(spec.run_dir)}/exit 2>/dev/null", timeout=30)
        exit_code = int(res.stdout) if res.stdout.strip().lstrip("-").isdigit() else None
        timed_out = exit_code is None
        tail = await log_tail(sb, spec)
    return LaunchResult(
        exit_code=exit_code,
        timed_out=timed_out,
        duration_s=duration,
        log_path=spec.log_path,
        log_tail=tail,
        launched=launched,
    )
