"""Agent sandboxes prepared ahead (rollout/prepare.py): the pool and one preparation per group.

Real components: the Docker engine (``docker commit`` snapshots, containers), the example
tasks' images and set-up, the Claude Code harness (its install from the host cache and its
configuration, which writes the session key).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.harness import HarnessContext, get_harness
from coding_agent_rl.rollout.agent import AgentPhase
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.isolation import AgentNetwork
from coding_agent_rl.rollout.prepare import AgentPreparer, SandboxSupply
from coding_agent_rl.sandbox import SandboxGone
from coding_agent_rl.sandbox import docker_engine as engine

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

DIRS = "/home /root /tmp /etc /opt/coding-agent-rl"  # where a CLI's config and launcher live
KEY = "sk-car-test-" + "5" * 32  # the session key the first rollout's CLI is configured with


def _supply(**kw: Any) -> SandboxSupply:
    config = RolloutConfig(backend="docker", agent_network="open")
    agent = AgentPhase(
        config, get_harness("claude_code", check_adapter=False), AgentNetwork("open", "docker")
    )
    return SandboxSupply(AgentPreparer(agent), **kw)


async def _ready(supply: SandboxSupply, row: TaskRow, n: int) -> None:
    task = supply._tasks[row.instance_id]
    while len([f for f in task.ready if f.done()]) < n:
        await asyncio.sleep(0.1)


async def test_a_pooled_sandbox_holds_nothing_of_another_rollout_and_no_key_before_its_claim(
    example_rows: dict[str, TaskRow],
) -> None:
    row = example_rows["slugify"]
    supply = _supply(pool_size=2, fork=True, group_size=3)
    supply.expect([row] * 3)
    try:
        first, base = await supply.obtain(row)
        assert base
        # The first rollout: configured with its key, leaves a file and a process behind.
        ctx = HarnessContext(
            adapter_url="http://127.0.0.1:9", session_id=KEY, model="policy", workdir=row.workdir
        )
        harness = supply.preparer.agent.harness  # type: ignore[attr-defined]
        assert harness is not None
        await harness.configure(first, ctx)
        await harness.run(first, ctx, "fix it", 5.0)  # writes its launcher (with the key)
        await first.exec(
            f"echo left > {row.workdir}/left_behind && (setsid nohup sleep 991 >/dev/null 2>&1 &)",
            check=True,
        )
        assert (await first.exec(f"grep -rl {KEY} {DIRS}")).stdout  # it's there
        hits = supply.stats.hits
        second, base2 = await supply.obtain(row)
        try:
            assert supply.stats.hits == hits + 1 and base2 == base
            assert second.sandbox_id != first.sandbox_id
            assert not (await second.exec(f"test -e {row.workdir}/left_behind")).ok
            assert "sleep 991" not in (await second.exec("ps -eo args")).stdout
            found = await second.exec(f"grep -rl {KEY} {DIRS} {row.workdir}")
            assert found.stdout == ""
            for path in harness.config_files(ctx):
                assert not (await second.exec(f"test -e {path}")).ok, path
            # Prepared: the task's workspace is checked out at its base.
            head = await second.exec("git rev-parse HEAD", cwd=row.workdir)
            assert head.stdout.strip() == base
        finally:
            await second.close()
            await first.close()
    finally:
        await supply.close()


async def test_the_groups_snapshot_goes_when_its_copies_are_done_and_the_pool_at_close(
    example_rows: dict[str, TaskRow],
) -> None:
    row = example_rows["pager"]
    supply = _supply(pool_size=1, fork=True, group_size=2)
    supply.expect([row] * 2)
    a, _ = await supply.obtain(row)
    snap_future = supply._tasks[row.instance_id].snapshot
    assert snap_future is not None
    image = (await snap_future)[0].image_id  # type: ignore[attr-defined]
    b, _ = await supply.obtain(row)
    assert any(i["Id"] == image for i in engine.list_images())
    await a.close()
    assert any(i["Id"] == image for i in engine.list_images())  # b still runs from it
    await b.close()
    assert not any(i["Id"] == image for i in engine.list_images())
    # A pool that still holds prepared sandboxes at the end: close removes them.
    other = example_rows["slugify"]
    supply.expect([other] * 2)
    await _ready(supply, other, 1)
    pooled = (await supply._tasks[other.instance_id].ready[0]).sandbox
    await supply.close()
    assert not engine.list_containers(pooled.run_id)  # type: ignore[attr-defined]
    assert supply.stats.pool_size == 0  # every pooled sandbox counted out as close removed it


@pytest.mark.parametrize("checked", [False, True], ids=["health_check_off", "health_check_on"])
async def test_a_pooled_sandbox_that_died_is_replaced_not_handed_out(
    example_rows: dict[str, TaskRow], monkeypatch: pytest.MonkeyPatch, checked: bool
) -> None:
    row = example_rows["slugify"]
    supply = _supply(pool_size=1, fork=False, group_size=2)
    if not checked:

        async def healthy(sb: Any) -> bool:
            return True

        monkeypatch.setattr(SandboxSupply, "_healthy", staticmethod(healthy))
    supply.expect([row] * 2)
    try:
        await _ready(supply, row, 1)
        dead = (await supply._tasks[row.instance_id].ready[0]).sandbox
        engine.remove_container(dead.container_id)  # type: ignore[attr-defined]
        replaced = supply.stats.replaced
        sb, _ = await supply.obtain(row)
        try:
            if not checked:  # the harm: the rollout gets a sandbox that is gone
                assert sb is dead
                with pytest.raises(SandboxGone):
                    await sb.exec("true")
            else:
                assert sb is not dead and supply.stats.replaced == replaced + 1
                assert (await sb.exec("git status --short", cwd=row.workdir)).ok
        finally:
            await sb.close()
            await dead.close()
    finally:
        await supply.close()


async def test_an_abandoned_groups_snapshot_is_evicted_when_another_group_needs_one(
    example_rows: dict[str, TaskRow], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group whose other samples never come (the trainer aborted them) must not keep its
    snapshot for the whole run."""
    from coding_agent_rl.rollout import prepare

    monkeypatch.setattr(prepare, "MAX_IDLE_SNAPSHOTS", 1)
    supply = _supply(fork=True, group_size=2)
    try:
        a, _ = await supply.obtain(example_rows["pager"])
        making = supply._tasks[example_rows["pager"].instance_id].snapshot
        assert making is not None
        image = (await making)[0].image_id  # type: ignore[attr-defined]
        await a.close()  # one of its two samples ran; the other never comes
        assert any(i["Id"] == image for i in engine.list_images())
        b, _ = await supply.obtain(example_rows["slugify"])  # another group's first sample
        await b.close()
        assert not any(i["Id"] == image for i in engine.list_images())
    finally:
        await supply.close()


async def test_a_claim_still_copying_keeps_its_groups_snapshot_when_a_sibling_closes(
    example_rows: dict[str, TaskRow],
) -> None:
    """The group's last claim is waiting for a creation slot when its sibling's copy closes:
    the snapshot must stay for it (removing it would fail the claim as infra)."""
    from coding_agent_rl import settings
    from coding_agent_rl.sandbox import admission

    row = example_rows["pager"]
    supply = _supply(fork=True, group_size=2)
    with settings.using(settings.load(boot_concurrency=1, admission_jitter_s=0.0)):
        try:
            a, _ = await supply.obtain(row)
            making = supply._tasks[row.instance_id].snapshot
            assert making is not None
            image = (await making)[0].image_id  # type: ignore[attr-defined]
            gate = admission._gate("docker", 1)
            await gate.acquire()  # the engine is busy: the next copy waits for its slot
            try:
                claim = asyncio.ensure_future(supply.obtain(row))
                await asyncio.sleep(0.3)
                assert not claim.done()
                await a.close()  # the sibling's copy goes while the claim is copying
            finally:
                gate.release()
            b, base = await claim
            try:
                assert base and (await b.exec("git status --short", cwd=row.workdir)).ok
                assert any(i["Id"] == image for i in engine.list_images())
            finally:
                await b.close()
            assert not any(i["Id"] == image for i in engine.list_images())  # then it goes
        finally:
            await supply.close()


async def test_a_supply_that_is_off_keeps_nothing_of_the_rows_expected(
    example_rows: dict[str, TaskRow],
) -> None:
    supply = _supply(group_size=4)  # no pool, no copies: every rollout makes its own
    assert not supply.active
    supply.expect([example_rows["slugify"], example_rows["pager"]] * 500)
    assert supply._tasks == {}


async def test_a_claim_cancelled_while_its_sandbox_is_prepared_leaves_it_to_the_pool(
    example_rows: dict[str, TaskRow],
) -> None:
    """A rollout aborted while it waits for a pooled sandbox: the sandbox is not lost (the next
    claim gets it, close removes it)."""
    row = example_rows["slugify"]
    supply = _supply(pool_size=1, fork=False, group_size=3)
    supply.expect([row] * 3)
    try:
        fut = supply._tasks[row.instance_id].ready[0]
        claim = asyncio.ensure_future(supply.obtain(row))
        await asyncio.sleep(0.2)
        assert not fut.done()
        claim.cancel()
        await asyncio.wait([claim])
        pooled = (await fut).sandbox
        hits = supply.stats.hits
        sb, base = await supply.obtain(row)  # the next claim is served the prepared one
        assert sb is pooled and base and supply.stats.hits == hits + 1
        await sb.close()
    finally:
        await supply.close()


@pytest.mark.parametrize("idle_s", [0.0, 2.0], ids=["idle_limit_off", "idle_limit_on"])
async def test_a_pooled_sandbox_left_unclaimed_goes_after_the_idle_limit(
    example_rows: dict[str, TaskRow], idle_s: float
) -> None:
    """A claim that does not come (a stalled trainer, a group cut short) must not hold a
    prepared container for the rest of the run, nor have it remade."""
    row, later = example_rows["slugify"], example_rows["pager"]
    supply = _supply(pool_size=1, pool_idle_s=idle_s, fork=False)
    supply.expect([row, later])
    loop = asyncio.get_running_loop()
    try:
        await _ready(supply, row, 1)
        pooled = (await supply._tasks[row.instance_id].ready[0]).sandbox
        cid = pooled.container_id  # type: ignore[attr-defined]
        expired, misses, t0 = supply.stats.expired, supply.stats.misses, loop.time()
        while supply.stats.expired == expired and loop.time() - t0 < idle_s + 5.0:
            await asyncio.sleep(0.05)
        waited = loop.time() - t0
        if supply._expiring:
            await asyncio.wait(set(supply._expiring))
        alive = any(c["Id"] == cid for c in engine.list_containers())
        if not idle_s:  # the harm: it waits for ever
            assert alive and supply.stats.expired == expired
            return
        assert not alive and supply.stats.expired == expired + 1 and waited < idle_s + 3.0
        assert row.instance_id not in supply._tasks  # not remade for the claim that left
        # Its room went to the row expected next, whose claim is then a hit.
        await _ready(supply, later, 1)
        sb, _ = await supply.obtain(later)
        await sb.close()
        assert supply.stats.misses == misses
        # The abandoned row's claim, if it comes after all, prepares on demand.
        sb, base = await supply.obtain(row)
        await sb.close()
        assert base and supply.stats.misses == misses + 1
    finally:
        await supply.close()
