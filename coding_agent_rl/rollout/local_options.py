"""The sandbox options rollouts need on the local (bubblewrap) backend.

A local sandbox shows its image read-only except for a few private copies (``/tmp``, ``/root``,
``/home``); a rollout also writes the task's repository, ``/etc`` (the agent's user, git's
system config) and the harness's run folder. The agent dials the adapter on 127.0.0.1, so its
sandbox shares the host's network; grading turns it off (``grading.sandbox_options_for``). The
agent CLI is bound read-only from the host cache instead of being uploaded into every sandbox.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Any

from coding_agent_rl.harness import get_harness
from coding_agent_rl.harness.launch import RUN_ROOT


def local_sandbox_options(rows: Iterable[Any], agent: str) -> dict[str, Any]:
    """Options for ``create_sandbox("local", ...)`` in rollouts of ``agent`` over ``rows``.

    Blocking: the agent CLI is fetched and unpacked into the host cache on first use.
    """
    writable = {"/etc", posixpath.dirname(RUN_ROOT), *(row.workdir for row in rows)}
    mounts = {} if agent == "native" else get_harness(agent).host_mounts()  # native: no CLI
    return {"network": "host", "writable": sorted(writable), "mounts": mounts}
