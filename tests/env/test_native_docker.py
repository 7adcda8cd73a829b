"""Native rollouts end to end in real Docker on the bundled tasks: the CPU policy servers (replay,
scripted) over HTTP, the native loop, the coding environment, the clean-sandbox grader, the
rollout runner's record and failure policy. Rollouts of one test run concurrently."""

from __future__ import annotations

import asyncio
import json
import subprocess
import types
import uuid

import pytest
from support.rollout_helpers import (
    REWRITE_TESTS,
    base_sample,
    check_outcome,
    containers,
    rollout_config,
    runtime,
    solve_steps,
    task_rule,
    write_script,
)
from support.slime_path import RM_CALLS, SlimeSample, generate_and_rm, train_data

from coding_agent_rl.env.base import EnvError
from coding_agent_rl.env.coding import CodingEnv
from coding_agent_rl.tokenizer import qwen3_tokenizer_dir
from coding_agent_rl.types import Status

pytestmark = [pytest.mark.docker]

GIVE_UP = [{"say": "I could not find the bug, so I leave the code as it is."}]
ILL_FORMED = [{"say": '<tool_call>\n{"name": "bash", "arguments": {"command": }\n</tool_call>'}]
LONG = [{"shell": "seq 1 400"} for _ in range(60)]


def slime_args(url: str, **extra) -> types.SimpleNamespace:
    """slime's args for a policy server at ``url`` (Qwen3-Coder's tool-call format)."""
    return types.SimpleNamespace(
        hf_checkpoint=str(qwen3_tokenizer_dir()),
        sglang_router_ip="127.0.0.1",
        sglang_router_port=int(url.rsplit(":", 1)[1]),
        rollout_max_context_len=16384,
        rollout_max_response_len=8192,
        sglang_tool_call_parser="qwen3_coder",
        sglang_reasoning_parser="qwen3",
        **extra,
    )


def native(tmp_path, **overrides):
    return rollout_config(tmp_path, infra_retries=1, **overrides)


async def run_all(rt, jobs):
    return await asyncio.gather(*(rt.runner.run(row, sample) for row, sample in jobs))


async def test_scripted_outcomes(rows, tmp_path):
    """Solved after an ill-formed call (answered as an observation, a turn used); gave up
    (reward 0, model); a long session ended by the token budget (TRUNCATED within the limits,
    still graded)."""
    spec = write_script(
        tmp_path / "script.json",
        [
            task_rule(rows["slugify"], ILL_FORMED + solve_steps(rows["slugify"])),
            task_rule(rows["pager"], GIVE_UP),
            task_rule(rows["money"], LONG),
            task_rule(rows["editor"], REWRITE_TESTS),
        ],
    )
    cfg = native(tmp_path, max_context=6000)
    names = ["slugify", "pager", "money", "editor"]
    async with runtime(policy=spec, agent="native", rollout=cfg) as rt:
        jobs = [(rows[n], base_sample(rows[n], i)) for i, n in enumerate(names)]
        (solved, gave_up, long, hack) = await run_all(rt, jobs)
    r = hack.record
    assert r["reward"] == 0.0 and r["failure_kind"] == "model", r
    assert "conftest.py" in r["protected_paths_touched"]  # dropped by the grader
    assert r["fail_reason"].startswith("diff only changes protected paths")
    assert "conftest.py" in (tmp_path / r["artifacts"]["diff"]).read_text()  # the hack was tried
    assert r["turns"] == 2 and hack.samples[0].metadata["turns"][1]["done"] is True
    for outcome in (solved, gave_up, long, hack):
        check_outcome(outcome.samples, outcome.record)
        assert len(outcome.samples) == 1 and outcome.samples[0].metadata["segment"] == "final"
    s, r = solved.samples[0], solved.record
    assert r["reward"] == 1.0 and s.status == Status.COMPLETED
    turns = s.metadata["turns"]
    assert turns[0]["info"] == {"ill_formed": True} and not turns[0]["done"]
    assert turns[0]["observation"].startswith("Error: ill-formed tool call")
    assert r["turns"] == len(turns) == len(solve_steps(rows["slugify"])) + 1
    assert s.weight_versions == ["0"] * len(turns)
    s, r = gave_up.samples[0], gave_up.record
    assert (r["reward"], r["failure_kind"], r["fail_reason"]) == (0.0, "model", "empty diff")
    assert r["turns"] == 1 and s.metadata["end_reason"] == "done"
    s, r = long.samples[0], long.record
    assert s.status == Status.TRUNCATED and len(s.tokens) <= 6000
    assert r["metrics"]["truncation_reason"] == "context_budget" and 3 < r["turns"] < 60
    assert r["failure_kind"] == "model" and r["reward"] == 0.0  # graded: nothing changed
    for outcome in (solved, gave_up, long, hack):
        assert outcome.record["timings"]["sandbox_s"] > 0 and outcome.record["retries"] == 0
    assert containers() == []


class FlakyEnv(CodingEnv):
    """The real coding env with an injected step failure (a stand-in for a transient fault such
    as a dropped connection to the engine): ``mode="once"`` fails the first attempt of turn 1,
    ``"always"`` every attempt."""

    def __init__(self, *args, mode: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.mode, self.calls = mode, 0

    async def step(self, response_text):
        self.calls += 1
        if self.mode == "always" or (self.mode == "once" and self.calls == 2):
            raise EnvError(f"injected failure (call {self.calls})")
        return await super().step(response_text)


class KillOnceEnv(CodingEnv):
    """A real fault: the agent's container is removed (``docker rm -f``) before the second step
    of the first rollout attempt."""

    killed = False

    async def step(self, response_text):
        if not KillOnceEnv.killed and len(self.transcript) == 1:
            KillOnceEnv.killed = True
            cid = self.sb.sandbox_id
            subprocess.run(["docker", "rm", "-f", cid], check=True, capture_output=True)
        return await super().step(response_text)


async def test_env_failures(rows, tmp_path):
    """A transient step failure is retried and the turn counted once (solved); a permanent one
    ends as infra after the retry budget (and the rollout's own infra retry); a container removed
    mid-episode is infra, and the retried rollout solves the task."""
    cfg = native(tmp_path)
    make = {}
    async with runtime(
        policy="replay",
        agent="native",
        rollout=cfg,
        harness_options={"max_env_retries_per_turn": 2},
    ) as rt:
        base_make = rt.runner.act.make_env

        def make_env(row, sb):
            env = base_make(row, sb)
            kind = make[row.instance_id]
            if kind == "kill":
                return KillOnceEnv(row, env.config, prompt=env.prompt, sandbox=sb)
            return FlakyEnv(row, env.config, prompt=env.prompt, sandbox=sb, mode=kind)

        rt.runner.act.make_env = make_env
        make.update({rows["slugify"].instance_id: "once", rows["pager"].instance_id: "always"})
        make[rows["editor"].instance_id] = "kill"
        jobs = [
            (rows[n], base_sample(rows[n], i)) for i, n in enumerate(["slugify", "pager", "editor"])
        ]
        transient, permanent, killed = await run_all(rt, jobs)
    for outcome in (transient, permanent, killed):
        check_outcome(outcome.samples, outcome.record)
    r, s = transient.record, transient.samples[0]
    assert r["reward"] == 1.0 and r["retries"] == 0
    assert [t["retries"] for t in s.metadata["turns"]] == [0, 1, 0]
    assert r["metrics"]["env_retries_by_type"] == {"EnvError": 1} and r["turns"] == 3
    r = permanent.record
    assert r["failure_kind"] == "infra" and r["retries"] == 1  # the rollout was retried once
    assert "env_failure" in r["abort_reason"] and "failed 3 times" in r["abort_reason"]
    assert r["metrics"]["env_retries_by_type"] == {"EnvError": 3}
    r = killed.record
    assert KillOnceEnv.killed and r["retries"] == 1 and r["reward"] == 1.0
    assert containers() == []


async def test_coding_env_through_slimes_call_path(rows, tmp_path, fresh_env_generate, monkeypatch):
    """``rollout_interaction_env_path: coding_agent_rl.env.coding`` (a key of the ``--custom-config-path`` YAML) with slime's Sample class and
    generate_and_rm: the rollout pipeline grades (reward set, slime's RM skipped); statuses are
    slime's."""
    from support.rollout_helpers import EXAMPLES, TASKS

    from coding_agent_rl.policy.scripted import ScriptedPolicy
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.sandbox.docker_engine import default_run_id

    script = {
        "rules": [
            task_rule(rows["slugify"], solve_steps(rows["slugify"])),
            task_rule(rows["pager"], GIVE_UP),
        ]
    }
    server = PolicyServer(ScriptedPolicy(script), "qwen3", "qwen3_coder")
    url = await server.start()
    config = tmp_path / "native.yaml"
    config.write_text("max_turns: 10\nrollout_interaction_env_path: coding_agent_rl.env.coding\n")
    args = slime_args(
        url,
        custom_generate_function_path="coding_agent_rl.generate_native.generate",
        custom_rm_path="support.slime_path.calc_reward",
        custom_config_path=str(config),
    )
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(EXAMPLES))  # slime reads the JSONL
    lines = {}
    for line in TASKS.read_text().splitlines():
        d = json.loads(line)
        lines[d["metadata"]["instance_id"].split("__", 1)[1]] = d
    samples = [
        SlimeSample(
            group_index=i,
            index=i,
            prompt=lines[n]["prompt"],
            label=lines[n]["label"],
            metadata=lines[n]["metadata"],
            session_id=uuid.uuid4().hex,
        )
        for i, n in enumerate(["slugify", "pager"])
    ]
    RM_CALLS.clear()
    sampling = {"temperature": 1.0, "max_new_tokens": 2048}
    try:
        results = await asyncio.gather(*(generate_and_rm(args, s, dict(sampling)) for s in samples))
        # One sample each (slime may hand back the pipeline's one-sibling list unwrapped).
        solved, gave_up = (r[0] if isinstance(r, list) else r for r in results)
    finally:
        await server.stop()
    assert RM_CALLS == []  # the env's grade is the reward
    assert solved.reward == 1.0 and solved.status is SlimeSample.Status.COMPLETED
    assert gave_up.reward == 0.0 and gave_up.status is SlimeSample.Status.COMPLETED
    assert gave_up.metadata["failure_kind"] == "model"
    assert train_data([solved, gave_up])["rewards"] == [1.0, 0.0]
    assert containers(default_run_id()) == []


async def test_swe_agent_native_through_the_main_generate(rows, monkeypatch):
    """``--custom-generate-function-path coding_agent_rl.generate.generate`` with
    ``SWE_AGENT=native``: the same datasets, the native loop instead of a CLI."""
    from support.rollout_helpers import EXAMPLES, TASKS

    from coding_agent_rl import generate as gen
    from coding_agent_rl.policy.scripted import ScriptedPolicy
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.sandbox.docker_engine import default_run_id
    from coding_agent_rl.types import Sample

    script = {"rules": [task_rule(rows["slugify"], solve_steps(rows["slugify"]))]}
    server = PolicyServer(ScriptedPolicy(script), "qwen3", "qwen3_coder")
    url = await server.start()
    args = slime_args(url)
    for name, value in {
        "SWE_AGENT": "native",
        "CODING_AGENT_RL_DATASET_DIR": str(EXAMPLES),
        "SWE_AGENT_TIME_BUDGET_SEC": "300",
        "SWE_EVAL_TIMEOUT_SEC": "120",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(gen, "_runtime", None)
    monkeypatch.setattr(gen, "_runtime_lock", None)
    line = next(
        json.loads(x) for x in TASKS.read_text().splitlines() if "slugify" in x.split('"label"')[1]
    )
    sample = Sample(index=0, group_index=0, prompt=line["prompt"], label=line["label"],
                    metadata=line["metadata"])  # fmt: skip
    try:
        out = await gen.generate(args, sample, {"temperature": 1.0, "max_new_tokens": 2048})
    finally:
        if gen._runtime is not None:
            await gen._runtime.stop()
        await server.stop()
    assert len(out) == 1 and out[0].reward == 1.0 and out[0].metadata["agent"] == "native"
    out[0].check()
    assert out[0].metadata["turns"] and await gen.reward(args, out[0]) == 1.0
    assert containers(default_run_id()) == []


async def test_a_prompt_over_the_context_budget_is_the_tasks_data(rows, tmp_path):
    """The task's prompt does not fit the context budget: a ``data`` placeholder, not retried
    (an infra failure would be), its sandboxes destroyed."""
    row = rows["pager"]
    async with runtime(
        policy="replay", agent="native", rollout=native(tmp_path, max_context=64)
    ) as rt:
        outcome = await rt.runner.run(row, base_sample(row, 0))
    r = outcome.record
    assert (r["failure_kind"], r["retries"]) == ("data", 0), r
    assert "prompt_too_long" in r["abort_reason"] and outcome.samples[0].remove_sample
    assert containers() == []
