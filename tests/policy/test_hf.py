"""The ``hf:`` policy: a tiny random-weight Qwen3ForCausalLM (2 layers, hidden 64, our
tokenizer's vocabulary) served on CPU; logprobs are checked against a teacher-forced rescoring."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
import torch

from coding_agent_rl.policy.hf import HFPolicy
from coding_agent_rl.policy.server import PolicyServer


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return HFPolicy(str(tiny_model_dir))


@pytest.fixture
async def url(policy, tokenizer):
    server = PolicyServer(policy, tokenizer)
    yield await server.start()
    await server.stop()


async def generate(url: str, input_ids: list[int], rid: str = "r", **sampling) -> dict:
    body = {"input_ids": input_ids, "sampling_params": sampling, "return_logprob": True, "rid": rid}
    async with aiohttp.ClientSession() as http, http.post(f"{url}/generate", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


def rescore(policy: HFPolicy, prompt: list[int], output: list[int], temperature: float):
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([prompt + output])).logits[0]
    logits = logits[len(prompt) - 1 : len(prompt) - 1 + len(output)]
    if temperature > 0:
        logits = logits / temperature
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [float(logprobs[i, t]) for i, t in enumerate(output)]


@pytest.fixture
def prompt_ids(renderer):
    return renderer.render([{"role": "user", "content": "Write a haiku about tokens."}], None)


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
async def test_logprobs_match_teacher_forced_rescoring(url, policy, prompt_ids, temperature):
    out = await generate(
        url,
        prompt_ids,
        max_new_tokens=24,
        temperature=temperature,
        top_p=0.95,
        top_k=50,
        sampling_seed=3,
        ignore_eos=True,
    )
    pairs = out["meta_info"]["output_token_logprobs"]
    ids = [p[1] for p in pairs]
    assert ids == out["output_ids"] and len(ids) == 24
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 24}
    expected = rescore(policy, prompt_ids, ids, temperature)
    assert all(p[0] <= 0 for p in pairs)
    assert max(abs(p[0] - e) for p, e in zip(pairs, expected, strict=True)) < 1e-4


async def test_greedy_is_deterministic_and_top_k_1_is_greedy(url, prompt_ids):
    a = await generate(url, prompt_ids, max_new_tokens=12, temperature=0.0)
    b = await generate(url, prompt_ids, max_new_tokens=12, temperature=0.0)
    c = await generate(
        url, prompt_ids, max_new_tokens=12, temperature=1.3, top_k=1, sampling_seed=99
    )
    assert a["output_ids"] == b["output_ids"] == c["output_ids"]
    s1 = await generate(url, prompt_ids, max_new_tokens=12, temperature=1.0, sampling_seed=1)
    s2 = await generate(url, prompt_ids, max_new_tokens=12, temperature=1.0, sampling_seed=2)
    assert s1["output_ids"] != s2["output_ids"]  # a random 151k-vocab model: distinct draws


async def test_stop_tokens_end_generation(url, prompt_ids):
    greedy = (await generate(url, prompt_ids, max_new_tokens=12, temperature=0.0))["output_ids"]
    # The first position holding a token not seen before it: stopping on it ends right there.
    at = next((i for i in range(1, len(greedy)) if greedy[i] not in greedy[:i]), 0)
    out = await generate(
        url, prompt_ids, max_new_tokens=50, temperature=0.0, stop_token_ids=[greedy[at]]
    )
    assert out["output_ids"] == greedy[: at + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": greedy[at]}


async def test_abort_request_stops_a_generation(url, policy, prompt_ids):
    steps: list[int] = []  # the model's forward passes: one per token
    hook = policy.model.register_forward_hook(lambda *_: steps.append(1))
    task = asyncio.ensure_future(
        generate(url, prompt_ids, rid="long-rid-1", max_new_tokens=100_000, temperature=1.0)
    )
    deadline = asyncio.get_running_loop().time() + 60  # a give-up point, not a bound
    while len(steps) < 2:  # the generation is under way
        assert asyncio.get_running_loop().time() < deadline and not task.done()
        await asyncio.sleep(0.05)
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/abort_request", json={"rid": "long-rid"}) as resp,
    ):
        assert resp.status == 200  # rid prefix match, like SGLang
    out = await asyncio.wait_for(task, 30)
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    hook.remove()
    assert 0 < len(out["output_ids"]) < 100_000
