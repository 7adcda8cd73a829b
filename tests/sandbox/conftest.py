"""Backends under test: docker (real engine), local (real bwrap), e2b (SDK stand-in)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from support import BASE_IMAGE

from coding_agent_rl.sandbox import Sandbox, create_sandbox


@dataclasses.dataclass
class Backend:
    name: str
    image: str
    non_root: str  # a user that exists in the image
    options: dict[str, Any]

    def make(self, **options: Any) -> Sandbox:
        return create_sandbox(self.name, self.image, **{**self.options, **options})


BACKEND_PARAMS = [
    pytest.param("docker", marks=pytest.mark.docker, id="docker"),
    pytest.param("local", id="local"),
    pytest.param("e2b", id="e2b_against_sdk_stand_in"),
]


@pytest.fixture
def use_e2b_stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[type]:
    """Route the e2b backend's SDK calls to the stand-in (E2B's cloud is unreachable here)."""
    from support.e2b_stand_in import StandInAsyncSandbox

    from coding_agent_rl.sandbox import e2b as e2b_backend

    monkeypatch.setattr(e2b_backend, "AsyncSandbox", StandInAsyncSandbox)
    for name in ("SLIME_AGENT_SANDBOX_IMAGE_METADATA_KEY", "CODING_AGENT_RL_E2B_ADAPTER_DNS"):
        monkeypatch.delenv(name, raising=False)
    StandInAsyncSandbox.reset()
    yield StandInAsyncSandbox
    for box in list(StandInAsyncSandbox.live):  # what a test left behind (a lost create)
        box._end()


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> Backend:
    name = request.param
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    if name == "docker":
        return Backend("docker", BASE_IMAGE, "nobody", {"run_id": run_id})
    if name == "local":
        from coding_agent_rl.sandbox.local import bwrap_reason

        reason = bwrap_reason()
        if reason:
            pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
        return Backend("local", "host", "nobody", {})
    request.getfixturevalue("use_e2b_stand_in")
    return Backend("e2b", BASE_IMAGE, "nobody", {})


@pytest.fixture
async def sb(backend: Backend) -> AsyncIterator[Sandbox]:
    async with backend.make() as box:
        yield box


@pytest.fixture
async def scratch(sb: Sandbox) -> AsyncIterator[str]:
    """A fresh directory inside the sandbox, writable by everyone; removed afterwards."""
    result = await sb.exec('d=$(mktemp -d) && chmod 777 "$d" && echo "$d"', check=True)
    path = result.stdout.strip()
    yield path
    await sb.exec(f"rm -rf {path}")
