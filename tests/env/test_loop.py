"""The native loop end to end without a sandbox: the real CPU policy server over HTTP (scripted
policy, real Qwen3 tokenizer), the real SGLang client, and a user environment (calc_env.py).

Checked: the sample is exactly prompt + sampled + observation tokens and equals a full render of
the conversation; masks and logprobs; budgets never exceeded; env retries bounded and counted
once per turn; failures attributed."""

from __future__ import annotations

import asyncio
import collections

import pytest
from support.calc_env import TOOLS, AsyncCalcEnv, CalcEnv

from coding_agent_rl.env.episode import LoopConfig
from coding_agent_rl.env.loop import run_episode
from coding_agent_rl.env.sample import fill_sample, rollout_metrics
from coding_agent_rl.model.parsers import parse_assistant
from coding_agent_rl.policy.base import pseudo_logprob
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.types import Sample, Status

PROMPT = [
    {"role": "system", "content": "You add numbers with tools."},
    {"role": "user", "content": "What is 1 + 2 + 3 + 4?"},
]
SAMPLING = {"max_new_tokens": 256, "temperature": 1.0}


def add(a: int, b: int) -> dict:
    return {"tool": {"name": "add", "arguments": {"a": a, "b": b}}}


def answer(value: int) -> dict:
    return {"tool": {"name": "answer", "arguments": {"value": value}}}


SOLVE = {"steps": [add(1, 2), add(3, 3), add(6, 4), answer(10)]}
ENDLESS = {"steps": [add(i, i) for i in range(200)]}


class Recording(ScriptedPolicy):
    """The scripted policy, remembering every request (session, prompt length, sampling)."""

    def __init__(self, script):
        super().__init__(script)
        self.requests: list[tuple[str, int, dict]] = []

    async def generate(self, request, env):
        self.requests.append((request.session, len(request.input_ids), dict(request.sampling)))
        return await super().generate(request, env)

    def count(self, session: str) -> int:
        return sum(1 for s, _, _ in self.requests if s == session)


async def episode(scripted_engine, encoder, env, script=SOLVE, config=None, sampling=SAMPLING):
    policy = Recording(script)
    client, _ = await scripted_engine(script, policy=policy)
    ep = await asyncio.wait_for(
        run_episode(
            env,
            engine=client,
            encoder=encoder,
            sampling_params=sampling,
            config=config or LoopConfig(max_turns=10),
            routing_key="s1",
            prompt=PROMPT,
            tools=TOOLS,
        ),
        60,
    )
    return ep, policy


async def test_sample_is_prompt_plus_sampled_plus_observations(scripted_engine, encoder, tokenizer):
    ep, policy = await episode(scripted_engine, encoder, CalcEnv(tool_messages=True))
    assert (ep.status, ep.end, len(ep.turns)) == ("completed", "done", 4)
    assert policy.count("s1") == 4
    # The whole token stream equals a full render of the conversation (transformers' own
    # apply_chat_template), followed by the last sampled turn.
    history, pos = list(PROMPT), 0
    for t in ep.turns:
        sampled = ep.response_ids[pos : pos + t.sampled]
        assert ep.loss_mask[pos : pos + t.sampled] == [1] * t.sampled
        # the policy's logprobs, unchanged (the scripted policy's are a function of id, position)
        assert ep.logprobs[pos : pos + t.sampled] == [
            pseudo_logprob(tok, i) for i, tok in enumerate(sampled)
        ]
        pos += t.sampled
        obs = ep.response_ids[pos : pos + t.observation_tokens]
        assert ep.loss_mask[pos : pos + len(obs)] == [0] * len(obs)
        assert ep.logprobs[pos : pos + len(obs)] == [0.0] * len(obs)
        pos += len(obs)
        message = parse_assistant(tokenizer.decode(sampled), TOOLS, tool_parser="qwen25").message
        if not t.done:
            history += [message, {"role": "tool", "content": t.observation}]
            rendered = tokenizer.apply_chat_template(
                history, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            assert ep.prompt_ids + ep.response_ids[:pos] == rendered
    assert pos == len(ep.response_ids)
    assert ep.weight_versions == ["0"] * 4  # one per turn, from meta_info.weight_version
    # The Sample: slime's invariants, per-turn metadata.
    s = fill_sample(Sample(index=3), ep, decode=tokenizer.decode, reward=1.0)
    s.check()
    assert s.tokens == ep.prompt_ids + ep.response_ids and s.status is Status.COMPLETED
    assert s.response_length == len(ep.response_ids) and s.reward == 1.0
    turns = s.metadata["turns"]
    assert [t["sampled"] for t in turns] == [t.sampled for t in ep.turns]
    assert all({"observation_tokens", "env_s", "retries", "action"} <= set(t) for t in turns)
    assert turns[0]["observation"] == "1 + 2 = 3" and '"add"' in turns[0]["action"]
    assert s.metadata["end_reason"] == "done" and s.metadata["segment"] == "final"


async def test_async_env_gives_the_same_tokens(scripted_engine, encoder):
    sync, _ = await episode(scripted_engine, encoder, CalcEnv())
    async_, _ = await episode(scripted_engine, encoder, AsyncCalcEnv())
    assert sync.response_ids == async_.response_ids and sync.loss_mask == async_.loss_mask


async def test_max_turns_executes_the_last_action_without_its_observation(scripted_engine, encoder):
    env = CalcEnv()
    ep, policy = await episode(scripted_engine, encoder, env, ENDLESS, LoopConfig(max_turns=5))
    assert (ep.status, ep.end, len(ep.turns), policy.count("s1")) == (
        "completed",
        "max_turns",
        5,
        5,
    )
    assert len(env.steps) == 5  # the fifth action ran
    assert ep.turns[-1].observation_tokens == 0 and ep.loss_mask[-1] == 1


@pytest.mark.parametrize("limit", [400, 520, 700, 1000])
@pytest.mark.parametrize("budget", ["context", "response"])
async def test_token_budget_is_never_exceeded(scripted_engine, encoder, limit, budget):
    """A long session (padded observations) under a context / response budget: TRUNCATED with
    that reason, within the limit, every request capped by the room left."""
    config = (
        LoopConfig(max_turns=200, max_context=limit)
        if budget == "context"
        else LoopConfig(max_turns=200, max_response=limit)
    )
    ep, policy = await episode(scripted_engine, encoder, CalcEnv(pad=150), ENDLESS, config)
    assert ep.status == "truncated" and ep.end == f"{budget}_budget", (ep.end, ep.reason)
    total, response = len(ep.prompt_ids) + len(ep.response_ids), len(ep.response_ids)
    assert (total if budget == "context" else response) <= limit
    prompt_len = len(ep.prompt_ids)
    for _, n_input, params in policy.requests:
        room = limit - n_input if budget == "context" else limit - (n_input - prompt_len)
        assert 1 <= params["max_new_tokens"] <= room
    s = fill_sample(Sample(index=0), ep, decode=str)
    assert s.status is Status.TRUNCATED and s.metadata["truncation_reason"] == f"{budget}_budget"


async def test_a_reply_cut_at_max_new_tokens_is_an_ordinary_turn(
    scripted_engine, encoder, tokenizer
):
    """The env sees the cut text; the template's end of turn closes it before the observation
    (the stream still equals a full render); with stop_on_length it ends TRUNCATED instead."""
    env = CalcEnv(done_on_text=False)
    config = LoopConfig(max_turns=3)
    ep, _ = await episode(
        scripted_engine, encoder, env, config=config, sampling={"max_new_tokens": 5}
    )
    assert (ep.status, ep.end, [t.finish for t in ep.turns]) == (
        "completed",
        "max_turns",
        ["length"] * 3,
    )
    assert [t.sampled for t in ep.turns] == [5, 5, 5] and len(env.steps) == 3
    history = list(PROMPT)
    assert env.steps[0] == tokenizer.decode(ep.response_ids[:5])
    first_obs = ep.response_ids[5 : 5 + ep.turns[0].observation_tokens]
    assert tokenizer.decode(first_obs).startswith("<|im_end|>\n<|im_start|>user")
    history += [
        {"role": "assistant", "content": env.steps[0]},
        {"role": "user", "content": "call a tool"},
    ]
    rendered = tokenizer.apply_chat_template(
        history, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ep.prompt_ids + ep.response_ids[: 5 + len(first_obs)] == rendered
    ep, _ = await episode(
        scripted_engine,
        encoder,
        CalcEnv(),
        config=LoopConfig(stop_on_length=True),
        sampling={"max_new_tokens": 5},
    )
    assert (ep.status, ep.end, len(ep.turns)) == ("truncated", "length", 1)


async def test_prompt_too_long_is_a_data_failure(scripted_engine, encoder):
    ep, policy = await episode(
        scripted_engine, encoder, CalcEnv(), config=LoopConfig(max_context=20)
    )
    assert (ep.status, ep.end, ep.failure_kind) == ("aborted", "prompt_too_long", "data")
    assert policy.requests == []


@pytest.mark.parametrize("reset", [False, True])
async def test_transient_step_failure_is_retried_and_the_turn_counted_once(
    scripted_engine, encoder, reset
):
    clean, _ = await episode(scripted_engine, encoder, CalcEnv())
    env = CalcEnv(fail_turns=[1], reset_on_fail=reset)
    config = LoopConfig(max_turns=10, env_retry_backoff_s=0.01)
    ep, policy = await episode(scripted_engine, encoder, env, config=config)
    assert ep.status == "completed" and len(ep.turns) == len(clean.turns) == 4
    assert ep.response_ids == clean.response_ids  # the generation was not redone
    assert policy.count("s1") == 4
    assert [t.retries for t in ep.turns] == [0, 1, 0, 0]
    assert ep.turns[1].retry_types == {"EnvError": 1}
    assert env.attempts[1] == 2 and env.resets == (2 if reset else 1)
    assert rollout_metrics(ep)["env_retries_by_type"] == {"EnvError": 1}


async def test_a_permanently_failing_env_ends_as_infra_after_the_retry_budget(
    scripted_engine, encoder
):
    env = CalcEnv(fail="always", reset_on_fail=True)
    config = LoopConfig(max_turns=10, max_env_retries_per_turn=3, env_retry_backoff_s=0.01)
    ep, policy = await episode(scripted_engine, encoder, env, config=config)
    assert (ep.status, ep.end, ep.failure_kind) == ("aborted", "env_failure", "infra")
    assert "failed 4 times" in ep.reason and "the calculator is down" in ep.reason
    assert env.attempts[0] == 4 and policy.count("s1") == 1  # bounded: 1 + 3 retries
    assert ep.turns[0].retry_types == {"EnvError": 4}


async def test_a_fatal_env_error_is_not_retried(scripted_engine, encoder):
    env = CalcEnv(fail="fatal")
    ep, _ = await episode(scripted_engine, encoder, env)
    assert (ep.status, ep.end, ep.failure_kind) == ("aborted", "env_failure", "infra")
    assert env.attempts[0] == 1 and "burned" in ep.reason


async def test_policy_server_down_is_infra(scripted_engine, encoder):
    client, server = await scripted_engine(SOLVE)
    await server.stop()
    ep = await run_episode(
        CalcEnv(), engine=client, encoder=encoder, sampling_params=SAMPLING, prompt=PROMPT
    )
    assert (ep.status, ep.end, ep.failure_kind) == ("aborted", "policy_error", "infra")


async def test_image_observation_reaches_a_text_encoder_as_text(
    scripted_engine, encoder, tokenizer
):
    """An image the text-only encoder cannot show is answered in words, never dropped and
    never an infra failure (the env's "/tmp/plot.png" does not exist here: not decodable)."""
    ep, _ = await episode(scripted_engine, encoder, CalcEnv(images=True))
    assert (ep.status, ep.end) == ("completed", "done")
    assert "[image not shown: image: invalid base64 data]" in tokenizer.decode(ep.response_ids)
    assert ep.image_data == [] and ep.multimodal_train_chunks == []


async def test_per_turn_events_are_logged(scripted_engine, encoder, caplog):
    import json

    caplog.set_level("INFO", logger="coding_agent_rl.env")
    await episode(
        scripted_engine, encoder, CalcEnv(fail_turns=[0]), config=LoopConfig(env_retry_backoff_s=0)
    )
    lines = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("env.turn sid=s1 ")
    ]
    events = [json.loads(line.split(" ", 2)[2]) for line in lines]
    assert [e["turn"] for e in events] == [0, 1, 2, 3]
    assert events[0]["retries"] == 1 and events[-1]["done"] is True
    assert collections.Counter(k for e in events for k in e) == collections.Counter(
        {k: 4 for k in events[0]}
    )


async def test_generation_is_capped_by_the_room_left(scripted_engine, encoder):
    """The budget binds inside a generation: max_new_tokens = room, the engine stops at it, the
    sample fills the context exactly and ends TRUNCATED (context_budget), not 'length'."""
    free, _ = await episode(
        scripted_engine, encoder, CalcEnv(pad=150), ENDLESS, LoopConfig(max_turns=3)
    )
    first = free.turns[0]
    limit = len(free.prompt_ids) + first.sampled + first.observation_tokens + 7
    config = LoopConfig(max_turns=200, max_context=limit)
    ep, policy = await episode(scripted_engine, encoder, CalcEnv(pad=150), ENDLESS, config)
    assert (ep.end, len(ep.turns), ep.turns[1].sampled) == ("context_budget", 2, 7)
    assert len(ep.prompt_ids) + len(ep.response_ids) == limit
    assert policy.requests[1][2]["max_new_tokens"] == 7
