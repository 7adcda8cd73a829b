"""Sandboxes: ``async with create_sandbox("docker", image=...) as sb: await sb.exec("ls")``."""

from __future__ import annotations

from typing import Any

from coding_agent_rl.registry import Registry
from coding_agent_rl.sandbox.base import (
    CommandFailed,
    ExecResult,
    ImageNotFound,
    Sandbox,
    SandboxCreateError,
    SandboxError,
    SandboxFileNotFound,
    SandboxGone,
)

BACKENDS = Registry(
    "sandbox backend",
    "coding_agent_rl.sandboxes",
    {
        "docker": ("coding_agent_rl.sandbox.docker:DockerSandbox", None),
        "local": ("coding_agent_rl.sandbox.local:LocalSandbox", None),
        "e2b": ("coding_agent_rl.sandbox.e2b:E2BSandbox", "e2b"),
    },
)


def create_sandbox(backend: str, image: str, **options: Any) -> Sandbox:
    """A not-yet-started sandbox; ``async with`` creates it and always destroys it.

    Unknown backends and unknown options raise ``ValueError`` (never silently ignored).
    """
    cls = BACKENDS.load(backend)
    return cls(image, **options)


__all__ = [
    "BACKENDS",
    "CommandFailed",
    "ExecResult",
    "ImageNotFound",
    "Sandbox",
    "SandboxCreateError",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxGone",
    "create_sandbox",
]
