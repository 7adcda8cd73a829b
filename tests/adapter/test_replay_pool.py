"""Prefix replay across adapter processes (``AdapterPool``): the plan crosses the pipe with the
session's opening, the branch's first requests get the root's recorded replies (no policy call:
their logprobs are the replay's zeros), later ones go to the policy."""

from __future__ import annotations

import json
import uuid

import aiohttp
from support.adapter_clients import BASH

from coding_agent_rl.adapter.pool import AdapterPool
from coding_agent_rl.adapter.replay import ReplayPlan
from coding_agent_rl.adapter.server import AdapterConfig
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.policy.server import PolicyServer

SCRIPT = {"rules": [{"match": ".", "tool": {"name": "Bash", "arguments": {"command": "ls"}}}]}


async def conversation(url: str, sid: str, turns: int) -> None:
    """Anthropic Messages requests as Claude Code sends them, each tool call echoed back."""
    messages: list[dict] = [{"role": "user", "content": "List the files."}]
    headers = {"x-api-key": sid, "anthropic-version": "2023-06-01"}
    async with aiohttp.ClientSession() as http:
        for n in range(turns):
            body = {"model": "policy", "max_tokens": 256, "system": "You are a coding agent.",
                    "tools": [BASH], "messages": messages}  # fmt: skip
            async with http.post(f"{url}/v1/messages", json=body, headers=headers) as r:
                text = await r.text()
                assert r.status == 200, text
            content = json.loads(text)["content"]
            calls = [b for b in content if b["type"] == "tool_use"]
            messages.append({"role": "assistant", "content": content})
            results = [{"type": "tool_result", "tool_use_id": c["id"], "content": f"f{n}.py"}
                       for c in calls]  # fmt: skip
            messages.append({"role": "user", "content": results})


async def test_a_branch_replays_through_an_adapter_process(tokenizer):
    policy = PolicyServer(ScriptedPolicy(SCRIPT), tokenizer)
    policy_url = await policy.start()
    pool = AdapterPool(1, AdapterConfig(sglang_url=policy_url, tokenizer="qwen3"))
    await pool.start()
    try:
        root_sid, branch_sid = (f"{name}-{uuid.uuid4().hex}" for name in ("root", "branch"))
        await conversation(await pool.open(root_sid), root_sid, 3)
        root = await pool.turns(root_sid)
        plan = ReplayPlan.from_turns(root, 2)
        await conversation(await pool.open(branch_sid, replay=plan), branch_sid, 3)
        branch = await pool.turns(branch_sid)
    finally:
        await pool.stop()
        await policy.stop()
    assert [t.replay["of"] if t.replay else None for t in branch] == [0, 1, None]
    assert not any(t.replay["diverged"] for t in branch[:2])
    for mine, theirs in zip(branch[:2], root[:2], strict=True):
        assert mine.prompt_ids == theirs.prompt_ids and mine.output_ids == theirs.output_ids
        assert set(mine.output_logprobs) == {0.0} != set(theirs.output_logprobs)
    assert branch[2].replay is None and set(branch[2].output_logprobs) != {0.0}
    assert branch[2].prompt_ids == root[2].prompt_ids  # the same context, sampled anew
