"""A process that owns one sandbox and then waits to be killed (the orphan tests' victim).

``python -m support.orphan_owner BACKEND RUN_ID`` (``tests/`` on ``PYTHONPATH``) creates a sandbox
of ``BACKEND`` (docker: the base image; local: the host's file system), with the default limits
(so a capped disk where this host allows one), starts a detached ``sleep`` inside, prints one
JSON line of what it made (ids, host paths, the detached process's tag) and sleeps until killed:
it never closes the sandbox.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from coding_agent_rl.sandbox import create_sandbox
from support import BASE_IMAGE

TAG = "orphan-owner-sleep"


async def main(backend: str, run_id: str) -> None:
    if backend == "docker":
        sb = create_sandbox("docker", BASE_IMAGE, run_id=run_id)
    else:
        sb = create_sandbox("local", "host")
    await sb.__aenter__()
    await sb.exec(f"setsid nohup bash -c 'exec -a {TAG}-{run_id} sleep 1000' >/dev/null 2>&1 &")
    facts: dict[str, object] = {"sandbox_id": sb.sandbox_id}
    if backend == "docker":
        disk = sb._disk  # type: ignore[attr-defined]
        facts |= {
            "container": sb.container_id,  # type: ignore[attr-defined]
            "volumes": sb._volumes,  # type: ignore[attr-defined]
            "disk": str(disk.dir) if disk else None,
        }
    else:
        limits = sb._limits  # type: ignore[attr-defined]
        facts |= {
            "holder": sb._holder_pid,  # type: ignore[attr-defined]
            "store": str(sb._tmp),  # type: ignore[attr-defined]
            "cgroups": [str(d) for d in (limits.cgroup.dirs.values() if limits.cgroup else [])],
            "disk": str(limits.disk.dir) if limits.disk else None,
        }
    print(json.dumps(facts), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
