"""Snapshots: one prepared sandbox, n fresh copies (``Sandbox.snapshot``).

Real components: the Docker engine (``docker commit``, capped-disk volumes seeded from the
committed image), bubblewrap (private copies seeded from the snapshot's folder), the installed
``e2b`` SDK's signatures (its cloud is unreachable here: the call is bound, not sent).
"""

from __future__ import annotations

import inspect
import json
import os
import pathlib
import signal
import subprocess
import sys
import uuid
from typing import Any

import pytest
from support import BASE_IMAGE

from coding_agent_rl.sandbox import BACKENDS, Sandbox, SandboxError, create_sandbox
from coding_agent_rl.sandbox import docker_engine as engine

TESTS = pathlib.Path(__file__).resolve().parents[1]
WORK = "/workspace"  # a private path on both backends


def _make(backend: str, template: bool = False) -> tuple[Sandbox, dict[str, Any]]:
    if backend == "docker":
        image = BASE_IMAGE
        options: dict[str, Any] = {"run_id": f"test-{uuid.uuid4().hex[:8]}", "writable": [WORK]}
    else:
        from coding_agent_rl.sandbox.local import bwrap_reason

        if reason := bwrap_reason():
            pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
        image, options = "host", {}
    cls = BACKENDS.load(backend)
    made = cls.template_options(options) if template else options
    return create_sandbox(backend, image, **made), options


def _image_exists(image_id: str) -> bool:
    return any(i["Id"] == image_id for i in engine.client().api.images(all=True))


@pytest.mark.parametrize(
    "backend", [pytest.param("docker", marks=pytest.mark.docker), pytest.param("local")]
)
async def test_copies_start_prepared_and_are_independent_of_each_other_and_the_snapshot(
    backend: str,
) -> None:
    template, options = _make(backend, template=True)
    await template.__aenter__()
    await template.exec(
        f"mkdir -p {WORK}/repo && echo prepared > {WORK}/repo/state && "
        "(setsid nohup sleep 997 >/dev/null 2>&1 &)",
        check=True,
    )
    snap = await template.snapshot(**options)
    try:
        a, b = await snap.copies(2)
        try:
            for sb in (a, b):  # the preparation is there; the preparer's process is not
                assert (await sb.exec(f"cat {WORK}/repo/state")).stdout == "prepared\n"
                assert "sleep 997" not in (await sb.exec("ps -eo args")).stdout
            await a.exec(f"echo mine > {WORK}/repo/state && touch {WORK}/repo/secret", check=True)
            assert (await b.exec(f"cat {WORK}/repo/state")).stdout == "prepared\n"
            assert not (await b.exec(f"test -e {WORK}/repo/secret")).ok
            (c,) = await snap.copies(1)  # made after a's write: the snapshot did not change
            try:
                assert (await c.exec(f"cat {WORK}/repo/state")).stdout == "prepared\n"
                assert not (await c.exec(f"test -e {WORK}/repo/secret")).ok
            finally:
                await c.close()
        finally:
            await a.close()
            await b.close()
    finally:
        await snap.remove()
    await snap.remove()  # again: a no-op
    with pytest.raises(SandboxError, match="was removed"):
        await snap.copy()
    if backend == "docker":
        assert not _image_exists(snap.image_id)  # type: ignore[attr-defined]
        assert not engine.list_containers(options["run_id"])
    else:
        assert not snap.store.exists()  # type: ignore[attr-defined]


@pytest.mark.docker
async def test_docker_copies_get_their_own_capped_disk_seeded_from_the_snapshot() -> None:
    template, options = _make("docker", template=True)
    await template.__aenter__()
    assert template._disk is None  # type: ignore[attr-defined]  # everything in its layer
    await template.exec(f"mkdir -p {WORK} && echo seed > {WORK}/f", check=True)
    snap = await template.snapshot(**options)
    try:
        (copy,) = await snap.copies(1)
        try:
            assert copy._disk is not None  # type: ignore[attr-defined]
            out = (await copy.exec(f"cat {WORK}/f; findmnt -no SOURCE {WORK}")).stdout
            assert out.startswith("seed\n") and "/dev/loop" in out
        finally:
            await copy.close()
    finally:
        await snap.remove()


@pytest.mark.docker
async def test_a_sandbox_with_a_capped_disk_refuses_to_be_snapshotted() -> None:
    """Its files are on volumes, which a commit would silently leave out."""
    from coding_agent_rl.errors import SandboxError

    sb, options = _make("docker")
    async with sb:
        with pytest.raises(SandboxError, match="capped disk"):
            await sb.snapshot(**options)


@pytest.mark.docker
def test_a_dead_owners_snapshot_image_is_reaped_and_a_live_owners_is_kept() -> None:
    import asyncio

    run_id = f"test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "support.snapshot_owner", run_id],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the owner died: exit {proc.wait()}"
    image_id = json.loads(line)["image"]
    try:
        assert _image_exists(image_id)
        asyncio.run(engine.reap_report())  # its owner lives: kept
        assert _image_exists(image_id)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert _image_exists(image_id)  # SIGKILL: nothing of ours ran
    report = asyncio.run(engine.reap_report())
    assert report["snapshots"] >= 1 and not _image_exists(image_id)


def test_e2b_fork_binds_to_the_installed_sdk() -> None:
    """Our call, recorded, binds to the real ``AsyncSandbox.fork`` (timeout, count)."""
    import asyncio

    import e2b

    from coding_agent_rl.sandbox.e2b import E2BSandbox
    from coding_agent_rl.sandbox.e2b_snapshot import MAX_FORK

    calls: list[dict[str, Any]] = []

    class Recorder:
        sandbox_id = "parent"

        async def fork(self, *args: Any, **kwargs: Any) -> list[Any]:
            inspect.signature(e2b.AsyncSandbox.fork).bind(self, *args, **kwargs)
            calls.append(kwargs)
            return [Recorder() for _ in range(kwargs["count"])]

        async def kill(self, **opts: Any) -> bool:
            inspect.signature(e2b.AsyncSandbox.kill).bind(self, **opts)
            return True

    async def main() -> None:
        assert E2BSandbox.supports_snapshot()
        parent = E2BSandbox.adopt("tmpl", Recorder(), {})
        snap = await parent.snapshot()
        copies = await snap.copies(MAX_FORK + 3)
        assert len(copies) == MAX_FORK + 3
        assert [c["count"] for c in calls] == [MAX_FORK, 3]
        assert all(c["timeout"] == parent.lifetime_s for c in calls)
        for c in copies:
            await c.close()
        await snap.remove()

    asyncio.run(main())
    params = inspect.signature(e2b.AsyncSandbox.fork).parameters
    assert "count" in params and "timeout" in params
