"""``adapter_processes`` = 2 end to end: real Claude Code in Docker sandboxes (adapter-only
isolation: each sandbox's listener is served by its session's adapter process), the replay
policy, real grading. Rollouts are spread over both processes, every one solves its task with
exact samples, and after the runtime stops no adapter process and no container is left."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from support.rollout_helpers import base_sample, check_outcome, containers, runtime

from coding_agent_rl.sandbox import owner

pytestmark = [pytest.mark.docker, pytest.mark.agents]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone): the owner check the reaper uses."""
    return owner.start_time(pid) is not None


async def test_rollouts_over_two_adapter_processes(rows):
    tasks = list(rows.values())[:4]
    ports: dict[str, int] = {}
    async with runtime(policy="replay", adapter_processes=2) as rt:
        pool = rt.adapter
        pids, pool_ports = pool.pids(), pool.ports()
        assert len(pids) == 2 and all(map(alive, pids))
        url_for = rt.runner.act.url_for

        def spy(sid: str) -> str:
            url = url_for(sid)
            ports[sid] = pool.port_for(sid)
            return url

        rt.runner.act.url_for = spy
        popped: dict[str, list] = {}
        pop = pool.sessions.pop

        def keep(sid: str) -> list:
            popped[sid] = pop(sid)
            return popped[sid]

        pool.sessions.pop = keep
        outcomes = await asyncio.gather(
            *(rt.runner.run(row, base_sample(row, i)) for i, row in enumerate(tasks))
        )
    for outcome in outcomes:
        check_outcome(outcome.samples, outcome.record)
        assert outcome.record["failure_kind"] is None, outcome.record
        assert outcome.record["reward"] == 1.0
    for sid, turns in popped.items():
        # each turn extends the previous one token for token, in the session's own process
        assert len(turns) >= 2, sid
        for prev, turn in itertools.pairwise(turns):
            assert turn.prompt_ids[: len(prev.prompt_ids) + len(prev.output_ids)] == (
                prev.prompt_ids + prev.output_ids
            )
    # the samples are those records: the last turn's prompt + output, nothing re-tokenized
    finals = {tuple(t[-1].prompt_ids + t[-1].output_ids) for t in popped.values()}
    assert {tuple(s.tokens) for o in outcomes for s in o.samples} <= finals
    assert len(ports) == len(tasks) and sorted(set(ports.values())) == sorted(pool_ports)
    assert not any(map(alive, pids))
    assert containers() == []
