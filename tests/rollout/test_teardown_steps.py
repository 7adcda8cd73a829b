"""Teardown steps each in their own guard: one failing step is logged, named in the record and
counted in metrics.prom, and the others still run. A real Claude Code rollout in Docker (the
replay policy), with two teardown steps made to fail: the adapter session's close (before, one
``suppress`` around three steps skipped the other two: the session and its engine state leaked)
and the agent sandbox's release (a stand-in source that destroys it, then raises as an engine
API error would)."""

from __future__ import annotations

import pytest
from support.rollout_helpers import base_sample, containers, rollout_config, runtime

from coding_agent_rl.rollout.outputs import RunWriter
from coding_agent_rl.rollout.runner import RolloutRunner
from coding_agent_rl.rollout.sandboxes import FreshSandboxes
from coding_agent_rl.sandbox import SandboxError

pytestmark = [pytest.mark.docker, pytest.mark.agents]


class ReleaseFails(FreshSandboxes):
    """Destroys the sandbox, then fails as the engine's API would."""

    async def release(self, sb):
        await super().release(sb)
        raise SandboxError("engine API: 500 on DELETE (injected)")


async def test_a_failing_teardown_step_leaves_the_others_running(rows, tmp_path):
    row = rows["slugify"]
    async with runtime(policy="replay", rollout=rollout_config(tmp_path)) as rt:
        act = rt.runner.act
        sessions = act.adapter.sessions
        opened: list[str] = []
        real_close = sessions.close

        def close(sid):
            opened.append(sid)
            real_close(sid)
            raise RuntimeError("injected: session close failed")

        sessions.close = close
        runner = RolloutRunner(act=act, config=rt.runner.config, sandboxes=ReleaseFails())
        outcome = await runner.run(row, base_sample(row, 0))
        (sid,) = opened
        assert sid not in sessions  # popped after the failed close
    record = outcome.record
    assert record["reward"] == 1.0 and record["failure_kind"] is None, record  # graded
    assert record["teardown_failures"] == ["agent_sandbox", "adapter_session_close"]
    assert containers() == []  # the grading sandbox was destroyed too
    writer = RunWriter(tmp_path / "run")
    writer.add(outcome.samples, record)
    writer.close(writer.summary())
    prom = (tmp_path / "run" / "metrics.prom").read_text()
    assert 'coding_agent_rl_teardown_failures_total{step="agent_sandbox"} 1.0' in prom
    assert 'coding_agent_rl_teardown_failures_total{step="adapter_session_close"} 1.0' in prom
