"""A sandbox whose teardown fails is logged with its id and counted: a leak must show."""

from __future__ import annotations

import logging

from coding_agent_rl.rollout.outputs import MetricTotals
from coding_agent_rl.sandbox import base
from coding_agent_rl.sandbox.local import LocalSandbox


class LeakySandbox(LocalSandbox):
    """The real local backend, whose destroy fails after it has cleaned up."""

    backend = "leaky"

    async def _destroy(self) -> None:
        await super()._destroy()
        raise OSError("device or resource busy")


async def test_a_failed_teardown_is_logged_with_the_id_and_counted(caplog, tmp_path):
    before = base.TEARDOWN_FAILURES["leaky"]
    totals = MetricTotals()  # a run's metrics.prom, started before the leak
    with caplog.at_level(logging.ERROR, logger="coding_agent_rl.sandbox.base"):
        async with LeakySandbox("host") as sb:
            sid = sb.sandbox_id
            assert (await sb.exec("echo hi")).stdout == "hi\n"
    assert base.TEARDOWN_FAILURES["leaky"] == before + 1
    line = next(r.getMessage() for r in caplog.records if "teardown failed" in r.getMessage())
    assert sid and sid in line and "device or resource busy" in line
    await sb.close()  # idempotent: not counted twice
    assert base.TEARDOWN_FAILURES["leaky"] == before + 1
    totals.add({"reward": 1.0, "failure_kind": None})
    totals.write(tmp_path / "metrics.prom")
    prom = (tmp_path / "metrics.prom").read_text()
    assert 'coding_agent_rl_sandbox_teardown_failures_total{backend="leaky"} 1.0' in prom
