"""Admission control (sandbox/admission.py): creations in flight are capped per backend, a
creation that times out is destroyed, counted and retried, and nothing it made is left.

Real components: the Docker engine.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from support import BASE_IMAGE

from coding_agent_rl import settings
from coding_agent_rl.rollout.sandboxes import FreshSandboxes
from coding_agent_rl.sandbox import SandboxCreateError, admission, create_sandbox
from coding_agent_rl.sandbox import docker_engine as engine

pytestmark = pytest.mark.docker


async def _burst(n: int, run_id: str) -> int:
    """Start ``n`` sandboxes at once; the most creations seen in flight together."""
    stats = admission.STATS["docker"]
    most = 0
    done = False

    async def sample() -> None:
        nonlocal most
        while not done:
            most = max(most, stats.in_flight)
            await asyncio.sleep(0.005)

    sampler = asyncio.ensure_future(sample())
    boxes = [create_sandbox("docker", BASE_IMAGE, run_id=run_id, disk=None) for _ in range(n)]
    try:
        await asyncio.gather(*(b.__aenter__() for b in boxes))
    finally:
        done = True
        await sampler
        await asyncio.gather(*(b.close() for b in boxes))
    return most


@pytest.mark.parametrize("cap", [5, 2], ids=["cap_above_the_burst", "cap_2"])
async def test_creations_in_flight_never_exceed_the_cap(cap: int) -> None:
    conf = settings.load(boot_concurrency=cap, admission_jitter_s=0.05)
    with settings.using(conf):
        most = await _burst(5, f"test-{uuid.uuid4().hex[:8]}")
    if cap == 2:
        assert most == 2
    else:  # the burst does reach the engine together when the cap allows it
        assert most >= 3


async def test_a_creation_that_times_out_is_destroyed_counted_and_retried() -> None:
    """Through the pipeline's own path (``FreshSandboxes``, as the runner acquires)."""
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    stats = admission.STATS["docker"]
    timeouts, retries = stats.timeouts, stats.retries
    conf = settings.load(create_timeout_s=0.05, create_timeout_attempts=2)
    with settings.using(conf), pytest.raises(SandboxCreateError, match="timed out 2 time"):
        await FreshSandboxes().acquire("docker", BASE_IMAGE, {"run_id": run_id})
    assert (stats.timeouts, stats.retries) == (timeouts + 2, retries + 1)
    assert engine.list_containers(run_id) == []  # each timed-out attempt was removed
    # The same creation with room to finish succeeds on its first attempt.
    sb = await admission.start(lambda: create_sandbox("docker", BASE_IMAGE, run_id=run_id))
    try:
        assert (await sb.exec("true")).ok and stats.timeouts == timeouts + 2
    finally:
        await sb.close()


async def test_the_progress_line_and_metrics_prom_count_this_runs_creations(tmp_path) -> None:
    from coding_agent_rl.rollout.batch import Progress
    from coding_agent_rl.rollout.outputs import MetricTotals

    progress = Progress(1, stream=open(tmp_path / "log", "w"))  # noqa: SIM115
    totals = MetricTotals()
    assert "sandboxes" not in progress.line()  # nothing created in this run yet
    async with create_sandbox("docker", BASE_IMAGE, run_id=f"test-{uuid.uuid4().hex[:8]}"):
        pass
    assert "sandboxes: starting 0, start p50 " in progress.line()
    totals.add({"reward": 1.0})
    totals.write(tmp_path / "metrics.prom")
    prom = (tmp_path / "metrics.prom").read_text()
    assert 'coding_agent_rl_sandboxes{backend="docker",figure="started"} 1.0' in prom
    assert 'figure="start_p50_s"}' in prom
    progress.stream.close()


async def test_the_wait_for_a_slot_is_not_counted_against_the_creation_timeout() -> None:
    """A burst larger than the cap queues: a creation that waited longer than the timeout for its
    slot but then starts quickly must not be timed out (and retried, and failed as infra)."""
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    stats = admission.STATS["docker"]
    timeouts = stats.timeouts
    conf = settings.load(boot_concurrency=1, admission_jitter_s=0.0, create_timeout_s=20)
    with settings.using(conf):
        gate = admission._gate("docker", 1)
        await gate.acquire()  # the engine's one slot is busy for longer than the timeout
        try:
            waiting = asyncio.ensure_future(
                admission.start(
                    lambda: create_sandbox("docker", BASE_IMAGE, run_id=run_id),
                    timeout=4.0,
                    attempts=1,
                )
            )
            await asyncio.sleep(4.5)
            assert not waiting.done()
        finally:
            gate.release()
        sb = await waiting
        try:
            assert (await sb.exec("true")).ok and stats.timeouts == timeouts
        finally:
            await sb.close()
