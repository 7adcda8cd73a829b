"""Kill everything an exec started, from a second exec in the same sandbox.

Each exec carries a unique token in its environment (``TOKEN_ENV``). On timeout the backend runs
``kill_command(token)`` as root in the sandbox. It SIGKILLs, over a few rounds (to catch
children forked while it scans):

- every process whose environment carries the token, and
- every member of a session whose *leader* carries the token (this catches children that cleared
  their environment; a session led by a foreign process, e.g. the engine's agent, is never hit).

The exec must therefore be a session leader: Docker (runc) makes every exec one; other backends
wrap the command with ``setsid`` (:func:`session_wrapped`). Only bash and /proc are needed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
import uuid

TOKEN_ENV = "CODING_AGENT_RL_EXEC"

# $1 = "NAME=VALUE" of the token. /proc/PID/stat: fields after the last ") " are
# state ppid pgrp session ...; comm (in parentheses) may contain spaces.
_SCRIPT = r"""
tok=$1; me=$$
for round in 1 2 3 4 5 6 7 8; do
  victims=""; leaders=" "; stats=()
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$me" ] && continue
    st=""; read -r st 2>/dev/null < "$d/stat" || continue
    f=(${st##*) })
    stats+=("$p:${f[3]}")
    hit=0
    while IFS= read -r -d '' kv; do
      if [ "$kv" = "$tok" ]; then hit=1; break; fi
    done 2>/dev/null < "$d/environ"
    if [ $hit = 1 ]; then
      victims="$victims $p"
      [ "${f[3]}" = "$p" ] && leaders="$leaders$p "
    fi
  done
  for ps in "${stats[@]}"; do
    case "$leaders" in *" ${ps#*:} "*) victims="$victims ${ps%%:*}";; esac
  done
  [ -z "$victims" ] && exit 0
  kill -KILL $victims 2>/dev/null
  sleep 0.02
done
exit 1
"""


def new_token() -> str:
    return uuid.uuid4().hex


def token_env(token: str) -> dict[str, str]:
    return {TOKEN_ENV: token}


def kill_command(token: str) -> str:
    """A ``bash -c`` script that kills the exec tagged with ``token`` and its session."""
    return f"bash -c {shlex.quote(_SCRIPT)} reaper {shlex.quote(f'{TOKEN_ENV}={token}')}"


def kill_argv(token: str) -> list[str]:
    return ["bash", "-c", _SCRIPT, "reaper", f"{TOKEN_ENV}={token}"]


def session_wrapped(cmd: str) -> str:
    """``cmd`` run by ``bash -c`` as the leader of a new session (exit status passed through)."""
    return f"exec setsid -w bash -c {shlex.quote(cmd)}"


def kill_tagged_here(token: str, pid_namespace: str | None = None) -> int:
    """The reaper's rules run from this host's /proc (for backends whose processes are local).

    ``pid_namespace`` (``readlink /proc/PID/ns/pid`` of a member) limits it to one namespace.
    Returns how many processes were signalled.
    """
    needle = f"{TOKEN_ENV}={token}".encode()
    killed = 0
    for _ in range(8):
        sessions: dict[int, int] = {}
        victims: set[int] = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                if pid_namespace and os.readlink(f"/proc/{pid}/ns/pid") != pid_namespace:
                    continue
                with open(f"/proc/{pid}/stat", "rb") as f:
                    sid = int(f.read().rsplit(b")", 1)[1].split()[3])
                with open(f"/proc/{pid}/environ", "rb") as f:
                    tagged = needle in f.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            sessions[pid] = sid
            if tagged:
                victims.add(pid)
        leaders = {p for p in victims if sessions.get(p) == p}
        victims |= {p for p, sid in sessions.items() if sid in leaders}
        victims.discard(os.getpid())
        if not victims:
            break
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.02)
    return killed
