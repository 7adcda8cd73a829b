"""The policy server answering 503 on ``/generate`` for longer than the client's backoff (as
during a weight update), mid-batch: real Claude Code in Docker, a real HTTP front on the real
policy server, the real batch and writer. Every rollout the window hit ends as ``infra`` and is
retried (the retry, after the window, solves its task); none is scored as the model's."""

from __future__ import annotations

import asyncio

import pytest

from coding_agent_rl.commands.bench.faults import run_fault
from coding_agent_rl.model.sglang import SGLangClient


def backoff_s(client: SGLangClient) -> float:
    """How long the client keeps asking through 503s before it gives up."""
    return sum(min(client.backoff_s * 2**a, 8.0) for a in range(client.connect_retries))


@pytest.mark.docker
@pytest.mark.agents
def test_503_window_longer_than_the_backoff_is_infra_and_retried(rows, tmp_path):
    o = asyncio.run(run_fault("policy_503", rows, tmp_path / "out", concurrency=2))
    f = o.figures
    assert o.events["in_flight"] == 2 and o.front.refused > 0
    assert o.events["window_s"] > backoff_s(SGLangClient("http://unused"))
    assert f["rows_lost"] == 0 and f["duplicates"] == 0 and f["torn_lines"] == 0, f
    assert f["misattributed"] == 0, [(r["instance_id"], r.get("fail_reason")) for r in o.records]
    assert f["leftovers"] == 0, f
    # the sessions open when the window began could not wait it out: each attempt ended as
    # infra and its retry, after the window, solved the task
    hit = [r for r in o.records if any(r["instance_id"] in sid for sid in o.events["hit"])]
    assert hit, o.events
    # (a session whose last model call came just before the window needed no retry)
    assert any(r["retries"] >= 1 for r in hit), hit
    for r in hit:
        assert r["reward"] == 1.0 and r["failure_kind"] is None, r
    assert all(r["reward"] == 1.0 for r in o.records)


@pytest.mark.parametrize(("status", "infra"), [(503, True), (502, False), (500, False)])
async def test_a_503_past_the_backoff_is_evidence_of_ours(status, infra):
    """Only "unavailable" is the server's own state whatever was asked; a 500 or a gateway's 502
    with a passing health check stays the request's (the agent could have provoked it)."""
    from support.sglang_stand_in import SGLangStandIn

    from coding_agent_rl.model.errors import UpstreamError

    stand_in = SGLangStandIn([1], status=status)
    client = SGLangClient(await stand_in.start(), connect_retries=2, backoff_s=0.01)
    try:
        with pytest.raises(UpstreamError, match=f"failed \\({status}\\)") as err:
            await client.generate([1, 2], {}, routing_key="k")
        assert err.value.infra_evidence is infra
        assert len(stand_in.generate_calls) == (3 if status in (502, 503) else 1)
    finally:
        await client.close()
        await stand_in.stop()
