"""The non-root user an agent CLI runs as: created on demand, owns the workdir, has its own HOME."""

from __future__ import annotations

import shlex

from coding_agent_rl.sandbox.base import Sandbox

_SCRIPT = r"""
u={user}; h={home}; w={workdir}
if ! id -u "$u" >/dev/null 2>&1; then
  if command -v useradd >/dev/null 2>&1; then
    if getent group "$u" >/dev/null 2>&1; then g="-g $u"; else g="-U"; fi
    useradd -m -d "$h" -s /bin/bash $g "$u"
  else
    # No shadow utils in this image: append the passwd/group entries by hand.
    uid=10001
    while cut -d: -f3 /etc/passwd | grep -qx "$uid"; do uid=$((uid+1)); done
    sh=/bin/sh; [ -x /bin/bash ] && sh=/bin/bash
    grep -q "^$u:" /etc/group || echo "$u:x:$uid:" >> /etc/group
    echo "$u:x:$uid:$(grep "^$u:" /etc/group | cut -d: -f3):agent:$h:$sh" >> /etc/passwd
  fi
fi
mkdir -p "$h" && chown "$u": "$h"
if [ -n "$w" ]; then mkdir -p "$w" && chown -R "$u": "$w"; fi
# The repo belongs to the agent, the grader and hooks may run as root: trust every repo.
if command -v git >/dev/null 2>&1; then git config --system --replace-all safe.directory '*'; fi
"""


def default_home(user: str) -> str:
    return "/root" if user == "root" else f"/home/{user}"


def agent_user_script(user: str, home: str, workdir: str | None) -> str:
    """The root bash script behind :func:`ensure_agent_user` (to join it with other steps)."""
    if user == "root":
        return "command -v git >/dev/null 2>&1 && git config --system --replace-all safe.directory '*'; true\n"
    q = shlex.quote
    return _SCRIPT.format(user=q(user), home=q(home), workdir=q(workdir or ""))


async def ensure_agent_user(sb: Sandbox, user: str, home: str, workdir: str | None) -> None:
    """Create ``user`` (if missing) with ``home``; give it ``workdir``; trust all git repos."""
    await sb.exec(agent_user_script(user, home, workdir), check=True, timeout=300)
