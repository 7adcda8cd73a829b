"""Whether a sandbox can reach the adapter: a TCP probe from inside, before the agent runs.

Where the adapter listens and the address a sandbox dials are the backend's to say
(``Sandbox.adapter_bind_host`` / ``Sandbox.host_url``; ``ADAPTER_BIND_HOST`` /
``ADAPTER_PUBLIC_HOST`` override them): docker binds the bridge's gateway and dials it, local
uses 127.0.0.1, a remote backend (E2B) binds 0.0.0.0 and needs ``ADAPTER_PUBLIC_HOST``.
"""

from __future__ import annotations

import shlex
import urllib.parse

from coding_agent_rl.errors import HarnessError
from coding_agent_rl.sandbox.base import Sandbox


class AdapterUnreachable(HarnessError):
    """The sandbox cannot open a TCP connection to the adapter (an infrastructure failure)."""


UNREACHABLE_EXIT = 97  # the exit code of :func:`probe_script` when the connection fails


def probe_script(url: str, *, timeout: float = 10.0) -> str:
    """A bash fragment that exits :data:`UNREACHABLE_EXIT` unless a TCP connection to ``url``
    opens within ``timeout`` (bash's /dev/tcp, no curl needed); the reason goes to stderr."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    probe = shlex.quote(f"exec 3<>/dev/tcp/{shlex.quote(host)}/{port}")
    return (
        f"timeout {int(timeout)} bash -c {probe} || "
        f'{{ echo "connecting failed: exit $?" >&2; exit {UNREACHABLE_EXIT}; }}\n'
    )


def unreachable(url: str, stderr: str) -> AdapterUnreachable:
    parts = urllib.parse.urlsplit(url)
    where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    return AdapterUnreachable(
        f"the sandbox cannot connect to the adapter at {where} ({stderr.strip()[-300:]}); "
        "check ADAPTER_PUBLIC_HOST / ADAPTER_BIND_HOST and that the adapter listens on that address"
    )


async def check_reachable(sb: Sandbox, url: str, *, timeout: float = 10.0) -> None:
    """Open a TCP connection to ``url`` from inside the sandbox.

    Claude Code retries a refused connection for ~3 minutes before it gives up, so a wrong
    address is caught here instead of eating the agent's budget.
    """
    res = await sb.exec(probe_script(url, timeout=timeout), timeout=timeout + 5)
    if not res.ok:
        raise unreachable(url, res.stderr or f"exit {res.exit_code}")
