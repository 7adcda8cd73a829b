"""Fault tolerance of whole rollouts with the real Claude Code in Docker, each fault made real:

* a policy server stopped after the first turn (and back on its port for the retry);
* a policy that answers HTTP 500 on ``/generate`` (a stand-in policy that raises; the real
  ``PolicyServer`` turns that into the 500);
* the agent container removed with ``docker rm -f`` while the agent works;
* the agent CLI crashing on a bad command-line flag;
* tests that hang past the eval timeout, with and without the agent being at fault;
* the agent CLI killed while the adapter waits on the policy (its client disconnects).

All run concurrently in one batch next to a healthy rollout (once per module, 1-3 min); each
test then checks one rollout's record: it ended with a status and a reason, ``failure_kind``
separates infra from the model, infra failures were retried within ``infra_retries``, the healthy
rollout was solved, and no container is left.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import subprocess
import time
from typing import Any

import pytest
from support.rollout_helpers import (
    FAST_FAIL_HARNESS,
    RUN_ID,
    base_sample,
    check_outcome,
    containers,
    replace_row,
    rollout_config,
    runner_with,
    runtime,
    solve_steps,
    task_rule,
)

from coding_agent_rl.policy.scripted import ScriptedPolicy

pytestmark = [pytest.mark.docker, pytest.mark.agents]
log = logging.getLogger(__name__)

HARNESS = FAST_FAIL_HARNESS
KILL_RUN, HANGUP_RUN = f"{RUN_ID}-kill", f"{RUN_ID}-hangup"
STALL_S = 90.0


class FaultyPolicyStandIn(ScriptedPolicy):
    """A scripted policy that misbehaves for some sessions (matched by id substring): raises
    (the policy server answers HTTP 500) or, from the second request on, stalls until
    ``/abort_request`` names the request."""

    def __init__(self, script: dict[str, Any], *, fail: str, stall: str):
        super().__init__(script)
        self.fail, self.stall = fail, stall
        self.requests: collections.Counter[str] = collections.Counter()
        self.stalled: list[str] = []
        self.aborted: list[str] = []

    async def generate(self, request, env):
        sid = request.session
        self.requests[sid] += 1
        if self.fail in sid:
            raise RuntimeError("stand-in policy failure")
        if self.stall in sid and self.requests[sid] > 1:
            self.stalled.append(sid)
            try:
                await asyncio.wait_for(request.aborted.wait(), STALL_S)
                self.aborted.append(sid)
            except asyncio.TimeoutError:
                pass
        return await super().generate(request, env)


def sessions_with_turns(adapter: Any, needle: str) -> list[str]:
    store = adapter.sessions
    return [sid for sid in list(store._sessions) if needle in sid and store.turns(sid)]


async def wait_for(predicate, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def agent_containers(run_id: str) -> list[str]:
    """The labelled containers where the agent user runs something (not a grading sandbox)."""
    return [
        c for c in containers(run_id) if docker("exec", c, "pgrep", "-u", "agent").returncode == 0
    ]


@dataclasses.dataclass
class Batch:
    outcomes: dict[str, Any]  # scenario -> RolloutOutcome
    policy: FaultyPolicyStandIn
    events: dict[str, Any]
    leftovers: list[str]


async def run_batch(rows: dict[str, Any], tmp_path) -> Batch:
    from coding_agent_rl.harness import get_harness
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.tokenizer import load_tokenizer

    slow_then_solve = [{"shell": "sleep 20"}, *solve_steps(rows["daterange"])]
    hang_on_import = {
        "shell": "cd /testbed && printf 'import time\\ntime.sleep(600)\\n' >> ledger/money.py"
    }
    script = {
        "rules": [
            task_rule(rows["daterange"], slow_then_solve),
            task_rule(rows["money"], [hang_on_import, {"say": "Done."}]),
            *(
                task_rule(r, solve_steps(r))
                for k, r in rows.items()
                if k not in ("daterange", "money")
            ),
        ]
    }
    (tmp_path / "script.json").write_text(json.dumps(script))
    policy = FaultyPolicyStandIn(script, fail="example__pager-", stall="_hangup-")
    server = PolicyServer(policy, load_tokenizer("qwen3"), "qwen25")
    events: dict[str, Any] = {}
    cfg = rollout_config(tmp_path / "out", infra_retries=1)
    with_label = lambda run_id: dataclasses.replace(  # noqa: E731
        cfg, sandbox_options={**cfg.sandbox_options, "run_id": run_id}
    )
    url = await server.start("127.0.0.1", 0)
    try:
        async with (
            runtime(sglang_url=url, rollout=cfg, harness_options=HARNESS) as rt,
            runtime(
                policy=f"scripted:{tmp_path / 'script.json'}", rollout=cfg, harness_options=HARNESS
            ) as dying,
        ):
            crash = get_harness("claude_code", extra_args=["--no-such-flag"], extra_env={})
            runners = {
                "healthy": (rt.runner, rows["slugify"]),
                "http500": (rt.runner, rows["pager"]),
                "sandbox_killed": (runner_with(rt, config=with_label(KILL_RUN)), rows["daterange"]),
                "cli_crash": (runner_with(rt, harness=crash), rows["editor"]),
                "grading_hangs": (
                    rt.runner,
                    replace_row(rows["confparse"], test_cmd="sleep 60", test_timeout=3.0),
                ),
                "agent_code_hangs": (rt.runner, replace_row(rows["money"], test_timeout=10.0)),
                "client_hangup": (
                    runner_with(rt, config=with_label(HANGUP_RUN)),
                    replace_row(rows["slugify"], instance_id="example__slugify_hangup"),
                ),
                "policy_dies": (dying.runner, rows["pager"]),
            }
            tasks = {
                name: asyncio.create_task(runner.run(row, base_sample(row, i)))
                for i, (name, (runner, row)) in enumerate(runners.items())
            }
            await asyncio.gather(
                kill_sandbox(rt, events),
                hang_up(policy, events),
                kill_policy(dying, events, list(runners).index("policy_dies")),
            )
            outcomes = {name: await t for name, t in tasks.items()}
    finally:
        await server.stop()
    leftovers = containers() + containers(KILL_RUN) + containers(HANGUP_RUN)
    if leftovers:
        docker("rm", "-f", *leftovers)
    return Batch(outcomes, policy, events, leftovers)


async def kill_sandbox(rt: Any, events: dict[str, Any]) -> None:
    """``docker rm -f`` the daterange agent container while its first command (sleep) runs."""
    await wait_for(lambda: sessions_with_turns(rt.adapter, "daterange-"), 240, "a daterange turn")

    def sleeping() -> bool:
        return any("sleep 20" in docker("top", c).stdout for c in containers(KILL_RUN))

    deadline = time.monotonic() + 120  # a give-up point for the wait, not a bound on the code
    while not await asyncio.to_thread(sleeping):  # docker calls off the batch's loop
        assert time.monotonic() < deadline, "timed out waiting for the CLI running `sleep 20`"
        await asyncio.sleep(0.1)
    ids = agent_containers(KILL_RUN)
    events["killed"] = ids
    docker("rm", "-f", *ids)


async def hang_up(policy: FaultyPolicyStandIn, events: dict[str, Any]) -> None:
    """Kill the agent CLI (only the CLI: its launcher records the exit) while the adapter waits
    on the stalled policy."""
    await wait_for(lambda: policy.stalled, 240, "the stalled request")
    await asyncio.sleep(1)
    ids = agent_containers(HANGUP_RUN)
    events["hangup_containers"] = ids
    for c in ids:
        events["pkill"] = docker("exec", c, "pkill", "-9", "-u", "agent", "-x", "claude").returncode


async def kill_policy(rt: Any, events: dict[str, Any], index: int) -> None:
    """Stop the second runtime's policy server after its first turn; restart it on the same
    port once that attempt has ended."""
    from coding_agent_rl.policy.server import PolicyServer

    server = rt.policy_server
    port = int(server._runner.addresses[0][1])
    attempt0 = f"-{index}-0-"  # session ids are RUN-INSTANCE-INDEX-ATTEMPT-RANDOM
    await wait_for(lambda: sessions_with_turns(rt.adapter, attempt0), 240, "the first turn")
    first = sessions_with_turns(rt.adapter, attempt0)[0]
    await server.stop()
    events["policy_stopped"] = time.monotonic()
    await wait_for(lambda: first not in rt.adapter.sessions, 240, "attempt 0 to end")
    rt.policy_server = PolicyServer(server.policy, rt.tokenizer, "qwen25")
    await rt.policy_server.start("127.0.0.1", port)


@pytest.fixture(scope="module")
def batch(rows, tmp_path_factory) -> Batch:
    assert containers() == []
    t0 = time.monotonic()
    out = asyncio.run(run_batch(rows, tmp_path_factory.mktemp("faults")))
    log.warning("fault batch: %.1fs", time.monotonic() - t0)
    for name, o in out.outcomes.items():
        log.warning(
            "%s: %s",
            name,
            {
                k: o.record.get(k)
                for k in (
                    "failure_kind",
                    "reward",
                    "retries",
                    "abort_reason",
                    "fail_reason",
                    "agent_exit_code",
                )
            },
        )
    return out


def outcome(batch: Batch, name: str) -> dict[str, Any]:
    o = batch.outcomes[name]
    check_outcome(o.samples, o.record)
    return o.record


def test_no_container_left_and_every_rollout_ended(batch):
    assert batch.leftovers == []
    assert len(batch.outcomes) == 8
    for o in batch.outcomes.values():
        assert o.record["failure_kind"] in (None, "model", "infra")
        assert (
            o.record["failure_kind"] is None
            or o.record.get("abort_reason")
            or o.record.get("fail_reason")
        )


def test_healthy_rollout_in_the_same_batch_is_solved(batch):
    r = outcome(batch, "healthy")
    assert r["reward"] == 1.0 and r["failure_kind"] is None and r["retries"] == 0


def test_policy_http_500_is_infra_and_retried(batch):
    r = outcome(batch, "http500")
    assert r["failure_kind"] == "infra"
    assert r["retries"] == 1
    assert "500" in r["abort_reason"] and "stand-in policy failure" in r["abort_reason"]
    assert sum(n for sid, n in batch.policy.requests.items() if "example__pager-" in sid) >= 2


def test_policy_server_dies_after_first_turn_retry_succeeds(batch):
    r = outcome(batch, "policy_dies")
    assert "policy_stopped" in batch.events
    assert r["retries"] == 1, r
    assert r["reward"] == 1.0 and r["failure_kind"] is None


def test_sandbox_removed_mid_agent_is_infra_retry_succeeds(batch):
    r = outcome(batch, "sandbox_killed")
    assert len(batch.events["killed"]) == 1
    assert r["retries"] == 1, r
    assert r["reward"] == 1.0 and r["failure_kind"] is None


def test_agent_cli_crash_is_recorded_with_exit_code(batch):
    r = outcome(batch, "cli_crash")
    assert r["failure_kind"] == "infra" and r["retries"] == 1
    assert r["agent_exit_code"] not in (0, None)
    assert f"exit {r['agent_exit_code']}" in r["abort_reason"]
    assert "no-such-flag" in r["abort_reason"]


def test_tests_hanging_without_the_agent_too_is_infra(batch):
    r = outcome(batch, "grading_hangs")
    assert r["failure_kind"] == "infra" and r["retries"] == 1
    assert "timed out" in r["abort_reason"] and "also without" in r["abort_reason"]


def test_tests_hanging_because_of_the_agent_is_model(batch):
    r = outcome(batch, "agent_code_hangs")
    assert r["failure_kind"] == "model" and r["reward"] == 0.0 and r["retries"] == 0
    assert "timed out" in r["fail_reason"] and "diff is at fault" in r["fail_reason"]


def test_client_disconnect_mid_turn_aborts_and_ends_with_status(batch):
    r = outcome(batch, "client_hangup")
    assert len(batch.events["hangup_containers"]) == 1 and batch.events["pkill"] == 0
    stalled = batch.policy.stalled[0]
    assert stalled in batch.policy.aborted, "the adapter did not abort the orphaned generation"
    assert r["agent_exit_code"] == 137  # SIGKILL, recorded by the launcher
    assert r["failure_kind"] in ("infra", "model")
