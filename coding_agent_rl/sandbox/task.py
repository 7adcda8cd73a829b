"""Sandbox options for one task: the run's options plus the task's own limits and writable paths.

Backends whose image is read-only (``Sandbox.read_only_image``) also get what every task
sandbox writes (:data:`READ_ONLY_IMAGE_WRITES`), whoever creates it: ``run``, ``demo``, slime's
``generate`` and the native loop alike.

A task row may ask for other limits (``metadata.resources``: ``memory``, ``cpus``, ``pids``,
``disk``, ``nofile``); they apply where the backend enforces them (``Sandbox.limit_names``) and
are reported once where it does not (E2B sets them per template). The task's workdir (and any
other path the rollout writes) goes on the sandbox's capped disk where the backend has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coding_agent_rl.limits import warn_once
from coding_agent_rl.sandbox import BACKENDS

# What every task sandbox writes besides its workdir, made writable where the image is
# read-only (``Sandbox.read_only_image``): users and git's system config (/etc), our own tree
# (the agent CLI's run folder and uploads, the native loop's staging folder).
READ_ONLY_IMAGE_WRITES = ("/etc", "/opt/coding-agent-rl")


def task_options(
    backend: str,
    options: Mapping[str, Any] | None,
    *,
    resources: Mapping[str, Any] | None = None,
    writable: Iterable[str] = (),
) -> dict[str, Any]:
    """``options`` with the task's ``resources`` (they win over the run's) and ``writable``
    paths added for ``backend``."""
    cls = BACKENDS.load(backend)
    opts = dict(options or {})
    for key, value in (resources or {}).items():
        if key in cls.limit_names:
            opts[key] = value
        else:
            warn_once(
                f"{backend}:{key}",
                f"the {backend} sandbox does not enforce a per-sandbox {key} limit: "
                f"task resources.{key} is not applied",
            )
    if cls.read_only_image:
        writable = [*READ_ONLY_IMAGE_WRITES, *writable]
    if cls.takes_writable:
        have = list(opts.get("writable") or [])
        for path in writable:
            # a path below one already writable is on the same private copy / disk volume
            if path and not any(path == h or path.startswith(h.rstrip("/") + "/") for h in have):
                have.append(path)
        if have:
            opts["writable"] = sorted(have)
    return opts
