"""A process that snapshots one prepared Docker sandbox and then waits to be killed.

``python -m support.snapshot_owner RUN_ID`` (``tests/`` on ``PYTHONPATH``) prints one JSON line
(the snapshot image's id) and sleeps until killed: it never removes the snapshot.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from coding_agent_rl.sandbox import create_sandbox
from support import BASE_IMAGE


async def main(run_id: str) -> None:
    sb = create_sandbox("docker", BASE_IMAGE, run_id=run_id, disk=None)
    await sb.__aenter__()
    await sb.exec("echo prepared > /tmp/state", check=True)
    snap = await sb.snapshot(run_id=run_id)
    print(json.dumps({"image": snap.image_id}), flush=True)  # type: ignore[attr-defined]
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
