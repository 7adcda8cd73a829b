"""Where the adapter listens, and the address a sandbox uses to reach it, when the sandbox
reaches it over a network (agent network ``open``, and E2B). With ``adapter-only`` on a backend
local to this host the adapter is served inside each sandbox instead (``rollout/isolation.py``).

``ADAPTER_BIND_HOST`` / ``ADAPTER_PUBLIC_HOST`` override the per-backend defaults:

========  ===============================  ==============================================
backend   bind (host side)                 public (what the CLI inside the sandbox dials)
========  ===============================  ==============================================
docker    the bridge network's gateway     the same gateway address
local     127.0.0.1                        127.0.0.1 (the sandbox shares the host network)
e2b       0.0.0.0 (remote sandboxes)       must be given: ``ADAPTER_PUBLIC_HOST``
========  ===============================  ==============================================

Binding on the gateway (not 0.0.0.0) keeps the adapter off every other interface.
"""

from __future__ import annotations

import shlex
import urllib.parse

from coding_agent_rl import settings
from coding_agent_rl.errors import HarnessError
from coding_agent_rl.sandbox.base import Sandbox


class AdapterUnreachable(HarnessError):
    """The sandbox cannot open a TCP connection to the adapter (an infrastructure failure)."""


def _docker_gateway(network: str) -> str:
    from coding_agent_rl.sandbox.docker import gateway_ip

    return gateway_ip(network)


def adapter_bind_host(backend: str, network: str = "bridge") -> str:
    """The host address the adapter should listen on for sandboxes of ``backend``.

    ``network``: the Docker network the sandboxes join (their ``network`` option).
    """
    env = settings.current().adapter_bind_host
    if env:
        return env
    if backend == "docker":
        return _docker_gateway(network)
    if backend == "local":
        return "127.0.0.1"
    # A remote sandbox (e2b, ...) connects from outside this machine.
    return "0.0.0.0"


def adapter_public_host(backend: str, network: str = "bridge") -> str:
    """The adapter's host as a sandbox of ``backend`` sees it."""
    env = settings.current().adapter_public_host
    if env:
        return env
    if backend == "docker":
        return _docker_gateway(network)
    if backend == "local":
        return "127.0.0.1"
    raise ValueError(
        f"sandboxes of backend {backend!r} cannot reach this machine by a known address: "
        "set ADAPTER_PUBLIC_HOST to a host name or IP they can connect to"
    )


def adapter_public_url(backend: str, port: int, network: str = "bridge") -> str:
    """``http://<public host>:<port>`` (no ``/v1``: each harness appends what its CLI needs)."""
    host = adapter_public_host(backend, network)
    if ":" in host and not host.startswith("["):  # a bare IPv6 address
        host = f"[{host}]"
    return f"http://{host}:{port}"


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
