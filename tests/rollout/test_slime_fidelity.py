"""Real rollouts through slime's call path (the stand-in in ``tests/support/slime_stand_in.py``): real Claude Code
in Docker, real grading, the real adapter and tokenizer, the real CPU policy server (speaking
SGLang's API, aborts included) behind ``coding_agent_rl.generate``.

1. One rollout step of 2 prompts x 2 samples: a rollout that dispatches a subagent and solves
   (split into sibling samples), one that gives up, one that solves, one cut by
   ``rollout_max_response_len`` (TRUNCATED). slime's trainer reads statuses, truncation flags,
   rollout ids, weight versions and — through ``post_process_rewards`` — advantages that count
   each rollout once. ``CODING_AGENT_RL_OUT_DIR`` gets the same artifacts as ``run``.
2. slime's end-of-step abort while every rollout waits on the policy: the engines answer
   ``abort``, the CLIs stop, every sandbox goes, each rollout returns one ABORTED placeholder with
   ``remove_sample``; measured from the abort to the last sandbox gone.
3. The abort variant that cancels the pending tasks first: every sandbox is gone by the time the
   cancellation completes.

The policy picks its script by the routing key, i.e. by the ``session_id`` slime gives each sample,
which also checks that the adapter routes by it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import time
import types

import pytest
from support import slime_stand_in as slime
from support.rollout_helpers import EXAMPLES, containers, dataset_lines, solve_steps

from coding_agent_rl import generate as gen
from coding_agent_rl.policy.base import Completion, Policy, pseudo_logprob
from coding_agent_rl.policy.scripted import ScriptedPolicy

pytestmark = [pytest.mark.docker, pytest.mark.agents, pytest.mark.usefixtures("example_images")]

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 2048, "skip_special_tokens": False}
MAX_RESPONSE = 4000  # rollout_max_response_len: above every rollout here but the long one
SUB_PROMPT = "SUBTASK-7: list the repository"
HOLD_S = 240.0


class KeyedPolicy(Policy):
    """One scripted policy per routing-key prefix (``solve-...``, ``split-...``). Every reply
    carries its own weight version ``v<n>``. ``hold-...`` requests wait until ``/abort_request``
    names them, then answer ``finish_reason: abort`` with a partial output, as SGLang does."""

    name = "keyed"

    def __init__(self, scripts: dict[str, dict]):
        self.scripts = {prefix: ScriptedPolicy(s) for prefix, s in scripts.items()}
        self.server = None
        self.count = 0
        self.versions: dict[str, list[str]] = collections.defaultdict(list)
        self.holding: set[str] = set()  # sessions with a request waiting right now
        self.aborted: list[str] = []

    async def generate(self, request, env):
        prefix = request.session.split("-", 1)[0]
        if prefix == "hold":
            self.holding.add(request.session)
            try:
                await asyncio.wait_for(request.aborted.wait(), HOLD_S)
            finally:
                self.holding.discard(request.session)
            self.aborted.append(request.session)
            ids = env.encode("Let me look at")
            logprobs = [pseudo_logprob(t, i) for i, t in enumerate(ids)]
            return Completion(ids, logprobs, {"type": "abort", "message": "Abort in waiting queue"})
        done = await self.scripts[prefix].generate(request, env)
        self.count += 1
        self.server.weight_version = f"v{self.count}"  # read when the reply is built
        self.versions[request.session].append(self.server.weight_version)
        return done


def slime_sample(name: str, index: int, group: int, session: str) -> slime.Sample:
    """What slime's data source builds from a JSONL line, with the session id it assigns."""
    line = dataset_lines()[name]
    return slime.Sample(
        group_index=group,
        index=index,
        rollout_id=index,
        prompt=line["prompt"],
        label=line["label"],
        metadata=json.loads(json.dumps(line["metadata"])),
        session_id=session,
    )


@pytest.fixture
async def slime_world(rows, tmp_path_factory, monkeypatch):
    """``start(scripts, **args)`` -> (args, policy): the policy server on loopback as slime's
    router, slime's args, ``generate``'s process state reset; torn down after the test."""
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.sandbox.docker_engine import default_run_id
    from coding_agent_rl.tokenizer import build_qwen3_tokenizer

    tok = build_qwen3_tokenizer(tmp_path_factory.mktemp("qwen3-tokenizer"))
    servers = []
    monkeypatch.setenv("SWE_AGENT", "claude_code")
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(EXAMPLES))
    monkeypatch.setenv("SWE_AGENT_TIME_BUDGET_SEC", "300")
    monkeypatch.setenv("SWE_EVAL_TIMEOUT_SEC", "120")
    for name in ("_runtime", "_runtime_lock", "_writer"):
        monkeypatch.setattr(gen, name, None)

    async def start(scripts: dict[str, dict], **overrides):
        policy = KeyedPolicy(scripts)
        server = PolicyServer(policy, str(tok), "qwen3_coder")
        policy.server = server
        url = await server.start("127.0.0.1", 0)
        servers.append(server)
        args = types.SimpleNamespace(
            hf_checkpoint=str(tok),
            sglang_router_ip="127.0.0.1",
            sglang_router_port=int(url.rsplit(":", 1)[1]),
            sglang_tool_call_parser="qwen3_coder",
            sglang_reasoning_parser="qwen3",
            sglang_server_concurrency=4,
            rollout_max_context_len=32768,
            rollout_max_response_len=MAX_RESPONSE,
            custom_generate_function_path="coding_agent_rl.generate.generate",
            custom_rm_path="coding_agent_rl.generate.reward",
            custom_reward_post_process_path="coding_agent_rl.generate.post_process_rewards",
            advantage_estimator="grpo",
            rewards_normalization=True,
            grpo_std_normalization=False,
            n_samples_per_prompt=2,
            rollout_batch_size=2,
            reward_key=None,
            partial_rollout=False,
        )
        for key, value in overrides.items():
            setattr(args, key, value)
        return args, policy, url

    try:
        yield start
    finally:
        if gen._runtime is not None:
            await gen._runtime.stop()
        for server in servers:
            await server.stop()
    assert containers(default_run_id()) == [], "a sandbox was left behind"


def by_session(out: list[list[list[slime.Sample]]]) -> dict[str, list[slime.Sample]]:
    return {samples[0].session_id.split("-", 1)[0]: samples for group in out for samples in group}


async def test_a_rollout_step_as_slime_trains_it(slime_world, rows, tmp_path, monkeypatch):
    out_dir = tmp_path / "artifacts"
    monkeypatch.setenv("CODING_AGENT_RL_OUT_DIR", str(out_dir))
    subagent = {
        "tool": {
            "name": "Agent",
            "arguments": {
                "description": "List the repository",
                "prompt": SUB_PROMPT,
                "subagent_type": "general-purpose",
            },
        }
    }
    scripts = {
        "split": {
            "steps": [subagent, *solve_steps(rows["slugify"])],
            "rules": [
                {
                    "match_prompt": '(?<!": ")SUBTASK-7',
                    "steps": [{"shell": "ls"}, {"say": "SUB-DONE: listed."}],
                }
            ],
        },
        "giveup": {"steps": [{"say": "I give up."}]},
        "solve": {"steps": solve_steps(rows["pager"])},
        "long": {"steps": [{"shell": "seq 1 1500"}, {"say": "I give up."}]},
    }
    args, policy, _ = await slime_world(scripts)
    groups = [
        [slime_sample("slugify", 0, 0, "split-a"), slime_sample("slugify", 1, 0, "giveup-b")],
        [slime_sample("pager", 2, 1, "solve-c"), slime_sample("pager", 3, 1, "long-d")],
    ]
    inputs = [dataclasses.replace(s) for g in groups for s in g]
    state = slime.GenerateState(args)
    out = await asyncio.gather(
        *(slime.generate_and_rm_group(args, g, dict(SAMPLING), state=state) for g in groups)
    )
    got = by_session(out)
    print(
        "\n"
        + "\n".join(
            f"{k}: {[(s.metadata.get('segment'), s.status.value, s.response_length) for s in v]}"
            f" reward={v[0].reward} kind={v[0].metadata.get('failure_kind')}"
            f" why={v[0].metadata.get('abort_reason') or v[0].metadata['rollout_record'].get('fail_reason')}"
            for k, v in got.items()
        )
    )
    slime.validate_rollout_ids(out)
    flat = slime.flatten(out)
    Status = slime.Sample.Status
    for s in flat:
        assert type(s) is slime.Sample and type(s.status) is Status
        assert len(s.loss_mask) == len(s.rollout_log_probs) == s.response_length > 0
        assert s.response_length <= MAX_RESPONSE and len(s.tokens) <= 32768
    assert state.rm_calls == [] and state.unscored == []  # rewards came with the samples

    # The split rollout: subagent + final siblings, one rollout id, each trained turn versioned.
    split = got["split"]
    assert [s.metadata["segment"] for s in split][-1] == "final" and len(split) >= 2
    assert "subagent" in {s.metadata["segment"] for s in split}
    assert {s.rollout_id for s in split} == {0} and all(s.reward == 1.0 for s in split)
    assert all(s.status is Status.COMPLETED for s in split)
    # The truncated rollout: cut by the response budget, and slime's flag says so.
    (long,) = got["long"]
    assert long.status is Status.TRUNCATED and long.response_length <= MAX_RESPONSE
    assert long.metadata["truncation_reason"] == "response"
    assert long.metadata["rollout_record"]["metrics"]["truncated"] == 1
    assert got["solve"][0].reward == 1.0 and got["giveup"][0].reward == 0.0
    assert got["giveup"][0].metadata["failure_kind"] == "model"

    # Routing by slime's session ids; per-turn weight versions in order.
    assert set(policy.versions) == {"split-a", "giveup-b", "solve-c", "long-d"}
    for key, samples in got.items():
        seen = policy.versions[samples[0].session_id]
        for s in samples:
            assert s.session_id == samples[0].session_id
            assert len(s.weight_versions) == len(s.metadata["trained_turns"]) > 0
            assert set(s.weight_versions) <= set(seen), key
            assert s.weight_versions == sorted(s.weight_versions, key=lambda v: int(v[1:]))
    assert len({v for s in split for v in s.weight_versions}) == sum(
        len(s.weight_versions) for s in split
    )  # each turn trained once

    data = slime.convert_samples_to_train_data(args, flat)
    order = [s.metadata["rollout_record"]["routing_key"].split("-")[0] for s in flat]
    want = {"split": 0.5, "giveup": -0.5, "solve": 0.5, "long": -0.5}
    assert data["rewards"] == [want[k] for k in order]
    assert data["truncated"] == [int(k == "long") for k in order]
    # slime's own normalisation of the same list: not 2 x 2, so one batch-wide row.
    _, default = slime.post_process_rewards(
        types.SimpleNamespace(**{**vars(args), "custom_reward_post_process_path": None}), flat
    )
    assert default != data["rewards"]

    # The per-rollout record in metadata, and the same artifacts as `run`.
    record = got["solve"][0].metadata["rollout_record"]
    assert record["f2p_passed"] == record["f2p_total"] > 0 and record["failure_kind"] is None
    assert record["timings"]["total_s"] > 0 and record["retries"] == 0
    lines = [json.loads(x) for x in (out_dir / "results.jsonl").read_text().splitlines()]
    assert sorted(r["routing_key"] for r in lines) == sorted(policy.versions)
    assert 'outcome="solved"} 2' in (out_dir / "metrics.prom").read_text()
    for r in lines:
        for name in ("diff", "agent_log", "test_log"):
            assert (out_dir / r["artifacts"][name]).is_file(), (r["routing_key"], name)
    assert not (out_dir / "samples.jsonl").exists()
    # slime's own objects were not changed by generate().
    assert all(s.status is Status.PENDING and s.tokens == [] for s in inputs)


async def hold_all(policy: KeyedPolicy, n: int) -> None:
    deadline = time.monotonic() + 180
    while len(policy.holding) < n:
        assert time.monotonic() < deadline, f"only {len(policy.holding)} of {n} rollouts waiting"
        await asyncio.sleep(0.1)


async def until_no_sandbox(run_id: str) -> float:
    while containers(run_id):
        await asyncio.sleep(0.1)
    return time.monotonic()


def engine_ignoring_aborts(monkeypatch) -> None:
    """The defence off: an ``abort`` finish is a turn like any other (the behaviour before)."""
    from coding_agent_rl.adapter import turns

    async def generate(self, prepared, sid):
        if not prepared.budget_left:
            return turns.empty_length_generation()
        key = prepared.routing_key or sid
        return await self.sglang.generate(prepared.prompt_ids, prepared.sampling, routing_key=key)

    monkeypatch.setattr(turns.TurnEngine, "generate", generate)


@pytest.mark.parametrize("variant", ["drain", "drain-defence-off", "cancel"])
async def test_slime_abort_ends_every_rollout_promptly(slime_world, monkeypatch, variant):
    """slime's end-of-step abort while every rollout waits on the policy. ``drain``: the engines
    answer ``abort``, slime then awaits the rollouts: each returns an ABORTED placeholder.
    Without the defence the CLIs go on, slime's abort does not finish and the sandboxes stay.
    ``cancel``: slime cancels the pending tasks first."""
    from coding_agent_rl.sandbox.docker_engine import default_run_id

    if variant == "drain-defence-off":
        engine_ignoring_aborts(monkeypatch)
    args, policy, url = await slime_world({}, partial_rollout=variant != "cancel")
    groups = [
        [slime_sample("slugify", 0, 0, "hold-a"), slime_sample("slugify", 1, 0, "hold-b")],
        [slime_sample("pager", 2, 1, "hold-c")],
    ]
    state = slime.GenerateState(args)
    state.submit(groups, SAMPLING)
    await hold_all(policy, 3)
    assert len(containers(default_run_id())) >= 3  # every agent sandbox is up
    t0 = time.monotonic()
    gone = asyncio.ensure_future(until_no_sandbox(default_run_id()))
    if variant == "drain-defence-off":
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slime.abort(args, state, [url]), 10)
        assert containers(default_run_id()) and not gone.done()
        for task in state.pendings:  # clean up: our cancellation path
            task.cancel()
        await asyncio.gather(*state.pendings, return_exceptions=True)
        await asyncio.wait_for(gone, 60)
        return
    collected = await slime.abort(args, state, [url], cancel_first=variant == "cancel")
    t_done = time.monotonic()
    t_gone = await asyncio.wait_for(gone, 60)
    print(
        f"\n{variant}: abort -> all sandboxes gone {t_gone - t0:.2f} s, "
        f"-> slime's abort returned {t_done - t0:.2f} s"
    )
    assert sorted(policy.aborted) == ["hold-a", "hold-b", "hold-c"]
    assert t_gone - t0 < 30
    if variant == "cancel":
        # slime's group gather (no return_exceptions) finishes with the first cancelled
        # sibling; the other's teardown completes on slime's loop right after (measured above).
        assert collected == []
        return
    placeholders = [s for group in collected for samples in group for s in samples]
    assert len(placeholders) == 3 and len(state.unscored) == 3 and state.rm_calls == []
    for p in placeholders:
        assert type(p) is slime.Sample and p.status is slime.Sample.Status.ABORTED
        assert p.remove_sample is True and p.loss_mask == [0]
        assert p.metadata["failure_kind"] == "aborted"
        assert (
            "the policy server aborted a request (Abort in waiting queue)"
            in (p.metadata["abort_reason"])
        )
        assert p.metadata["rollout_record"]["retries"] == 0


async def test_a_cancelled_generate_returns_after_its_sandboxes_are_gone(slime_world):
    """Cancelling ``generate`` itself (what any trainer's task cancellation reaches): by the time
    the cancellation completes, the rollout's sandboxes (agent and grading) are destroyed."""
    from coding_agent_rl.sandbox.docker_engine import default_run_id

    args, policy, _ = await slime_world({})
    samples = [slime_sample("slugify", i, i, f"hold-{i}") for i in range(2)]
    tasks = [asyncio.ensure_future(gen.generate(args, s, dict(SAMPLING))) for s in samples]
    await hold_all(policy, 2)
    assert len(containers(default_run_id())) >= 2
    t0 = time.monotonic()
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    print(f"\ncancelled generate() returned after {time.monotonic() - t0:.2f} s")
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert containers(default_run_id()) == []
