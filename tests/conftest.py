"""Shared test plumbing: real-engine markers that skip loudly; under CI=true every skip is a
failure (nothing is silently left out of CI). Scale runs are deselected unless asked for."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

pytest_plugins = [
    "support.fixtures",  # the fixtures every folder shares
    "support.ci_skips",  # under CI=true a skip, at collection too, is a failure
]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=1)
def docker_engine_reason() -> str | None:
    """None when a Docker engine answers, else why not."""
    try:
        r = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"docker CLI unusable: {e}"
    if r.returncode != 0:
        return "no Docker engine answers (run scripts/ensure-docker.sh)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("CODING_AGENT_RL_SCALE") != "1":  # minutes and ~10 GB: opt in
        scale = [item for item in items if "scale" in item.keywords]
        if scale:
            config.hook.pytest_deselected(items=scale)
            items[:] = [item for item in items if "scale" not in item.keywords]
    reason = None
    if any("docker" in item.keywords for item in items):
        reason = docker_engine_reason()
    if reason is None:
        return
    for item in items:
        if "docker" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"SKIPPED (no engine): {reason}"))


def pytest_configure(config: pytest.Config) -> None:
    """Every Python child of the suite reports its leaks (``support/children.py``)."""
    from support.children import child_env

    os.environ["PYTHONWARNINGS"] = child_env()["PYTHONWARNINGS"]


def pytest_sessionstart(session: pytest.Session) -> None:
    if IN_CI and docker_engine_reason() is not None:
        raise pytest.UsageError(
            f"CI=true but {docker_engine_reason()}: docker tests cannot be skipped"
        )


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    reason = docker_engine_reason.cache_info().currsize and docker_engine_reason()
    if reason:
        terminalreporter.write_line(
            f"WARNING: docker-marked tests were SKIPPED: {reason}", red=True
        )
    vendor = sys.modules.get("support.slime_vendor")
    if vendor is not None and vendor.MISSING:
        terminalreporter.write_line(
            f"WARNING: slime tests were SKIPPED: {vendor.MISSING[0]}", red=True
        )


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    """A tiny random-weight Qwen2-VL checkpoint built offline (``policy/tiny_vlm.py``)."""
    from coding_agent_rl.policy.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))


@pytest.fixture(scope="session")
def vision(tiny_vlm_dir):
    """The tiny VLM's VisionProcessor (its real Qwen2-VL image processor + our tokenizer)."""
    from coding_agent_rl.multimodal.processor import VisionProcessor

    return VisionProcessor.load(tiny_vlm_dir)


@pytest.fixture(autouse=True)
def _no_installed_settings():
    """Settings an entry point installed during a test (generate, generate_native) end with it."""
    from coding_agent_rl import settings

    previous = settings.install(None)
    yield
    settings.install(previous)
