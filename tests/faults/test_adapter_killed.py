"""An adapter process SIGKILLed with sessions open, mid-batch: two adapter processes
(``adapter_processes=2``), real Claude Code in Docker, the real policy server, the real batch
and writer. The rollouts it served end as ``infra`` (retried), none as the model's; the batch
finishes with one record per row, and no container or adapter process is left."""

from __future__ import annotations

import asyncio

import pytest

from coding_agent_rl.commands.bench.faults import run_fault


@pytest.mark.docker
@pytest.mark.agents
def test_adapter_process_killed_with_sessions_open(rows, tmp_path):
    o = asyncio.run(run_fault("adapter_kill", rows, tmp_path / "out", concurrency=2))
    f = o.figures
    assert o.events["in_flight"] == 2 and o.events["killed_sessions"] >= 1, o.events
    assert f["rows_lost"] == 0 and f["duplicates"] == 0 and f["torn_lines"] == 0, f
    assert f["misattributed"] == 0, [(r["instance_id"], r.get("fail_reason")) for r in o.records]
    assert f["leftovers"] == 0, f
    # (no retry count is asserted: a killed session whose turns were already read back needs
    # none; the old code lost every row here, which rows_lost above catches)
    assert all(r["reward"] == 1.0 for r in o.records), o.records


async def test_a_dead_adapter_process_fails_its_calls_at_once_and_takes_no_session():
    """The pool's own side of the kill: a call to the dead process fails as ours at once (no
    wait on a pipe nobody reads), a new session goes to a live process, and with none left the
    open fails as ours too."""
    import os
    import signal
    import time

    from coding_agent_rl.adapter.pool import CALL_TIMEOUT_S, AdapterPool, AdapterProcessGone
    from coding_agent_rl.errors import InfraFailure

    pool = AdapterPool(2, sglang_url="http://127.0.0.1:9", tokenizer="qwen3")
    await pool.start()
    try:
        await pool.open("a")
        victim = pool._owner["a"]
        os.kill(victim.process.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(AdapterProcessGone, match="is gone"):
            while True:  # until the pool has seen the pipe break (polled, no sleep)
                await asyncio.to_thread(pool.sessions.turns, "a")
        # the old code waited out the call timeout on a pipe nobody reads
        assert time.monotonic() - t0 < CALL_TIMEOUT_S
        await pool.open("b")
        assert pool._owner["b"] is not victim
        (survivor,) = [c for c in pool._children if c is not victim]
        os.kill(survivor.process.pid, signal.SIGKILL)
        with pytest.raises(InfraFailure):
            while True:
                await pool.open(f"c-{time.monotonic()}")
    finally:
        await pool.stop()
    assert not any(c.process.is_alive() for c in (victim, survivor))
