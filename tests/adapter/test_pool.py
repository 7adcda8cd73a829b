"""Several adapter processes behind one adapter's contract (``adapter/pool.py``), over real HTTP:
sessions are spread over the processes, each session's turns land on (and only on) its process,
the tokens are the ones one in-process adapter records for the same conversation, a socket
inside another network namespace is served by the session's process, and no process outlives
the pool (nor a parent killed with SIGKILL)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import aiohttp
import pytest
from support.adapter_clients import BASH

from coding_agent_rl.adapter.pool import AdapterPool, sessions_per_process
from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.policy.server import PolicyServer
from coding_agent_rl.sandbox import owner

SCRIPT = {"rules": [{"match": ".", "tool": {"name": "Bash", "arguments": {"command": "ls"}}}]}
TURNS = 3


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone): the owner check the reaper uses."""
    return owner.start_time(pid) is not None


@pytest.fixture
async def policy_url(tokenizer):
    server = PolicyServer(ScriptedPolicy(SCRIPT), tokenizer)
    url = await server.start()
    yield url
    await server.stop()


def sse_content(text: str) -> list[dict]:
    blocks: dict[int, dict] = {}
    for chunk in text.split("\n\n"):
        data = [ln[5:].strip() for ln in chunk.splitlines() if ln.startswith("data:")]
        if not data:
            continue
        event = json.loads(data[0])
        if event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif event["type"] == "content_block_delta" and "partial_json" in event["delta"]:
            blocks[event["index"]]["input"] = json.loads(event["delta"]["partial_json"])
        elif event["type"] == "content_block_delta" and "text" in event["delta"]:
            blocks[event["index"]]["text"] = event["delta"]["text"]
    return [blocks[i] for i in sorted(blocks)]


async def conversation(url: str, sid: str, stream: bool, turns: int = TURNS) -> None:
    """``turns`` Anthropic Messages requests as Claude Code sends them, echoing each tool call
    back with a result (so later turns extend earlier ones)."""
    messages: list[dict] = [{"role": "user", "content": f"List the files ({sid[-4:]})."}]
    headers = {"x-api-key": sid, "anthropic-version": "2023-06-01"}
    async with aiohttp.ClientSession() as http:
        for n in range(turns):
            body = {
                "model": "policy",
                "max_tokens": 256,
                "system": "You are a coding agent.",
                "tools": [BASH],
                "messages": messages,
                "stream": stream,
            }
            async with http.post(f"{url}/v1/messages", json=body, headers=headers) as r:
                text = await r.text()
                assert r.status == 200, text
            content = sse_content(text) if stream else json.loads(text)["content"]
            calls = [b for b in content if b["type"] == "tool_use"]
            assert calls, content
            messages.append({"role": "assistant", "content": content})
            result = f"file_{n}.py\nREADME.md"
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": c["id"], "content": result}
                        for c in calls
                    ],
                }
            )


async def status_of(url: str, sid: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{url}/v1/models", headers={"x-api-key": sid}) as r,
    ):
        return r.status


async def test_sessions_spread_and_turns_stay_on_their_process(policy_url, tokenizer):
    pool = AdapterPool(2, AdapterConfig(sglang_url=policy_url, tokenizer="qwen3"))
    urls = await pool.start()
    pids = pool.pids()
    try:
        assert len(set(urls)) == 2 and len(pids) == 2 and all(map(alive, pids))
        sids = [f"pool-{i}-{uuid.uuid4().hex}" for i in range(6)]
        local = {sid: await pool.open(sid, max_turns=10) for sid in sids}
        assert sorted(sessions_per_process(pool).values()) == [3, 3]
        assert set(local.values()) == set(urls)
        await asyncio.gather(
            *(conversation(local[s], s, stream=i % 2 == 0) for i, s in enumerate(sids))
        )
        for sid in sids:
            other = next(u for u in urls if u != local[sid])
            assert await status_of(local[sid], sid) == 200
            assert await status_of(other, sid) == 401  # unknown on the other process
            turns = await pool.turns(sid)
            assert [t.index for t in turns] == list(range(TURNS))
            assert [t.parent for t in turns] == [None, 0, 1]  # rendered incrementally
            assert pool.sessions.errors(sid) == []
            assert pool.engine.aborted(sid) is None
            assert sid in pool.sessions

        # Tokens exact: one in-process adapter recording the same conversation agrees.
        single = AdapterServer(AdapterConfig(sglang_url=policy_url, tokenizer=tokenizer))
        url = await single.start()
        try:
            for i, sid in enumerate(sids[:2]):
                single.sessions.open(sid)
                await conversation(url, sid, stream=i % 2 == 0)
                assert await single.sessions.settled(sid)
                mine, theirs = await pool.turns(sid), single.sessions.turns(sid)
                for a, b in zip(mine, theirs, strict=True):
                    assert a.prompt_ids == b.prompt_ids
                    assert a.output_ids == b.output_ids
                    assert a.output_logprobs == b.output_logprobs
                    assert a.assistant["tool_calls"] == b.assistant["tool_calls"]
        finally:
            await single.stop()

        # Closing and popping go to the session's process; the session is gone from the pool.
        sid = sids[0]
        pool.sessions.close(sid)
        assert await status_of(local[sid], sid) == 503
        assert len(pool.sessions.pop(sid)) == TURNS
        assert sid not in pool.sessions and pool.sessions.turns(sid) == []
        with pytest.raises(KeyError):
            pool.port_for(sid)
    finally:
        await pool.stop()
    assert not any(map(alive, pids))


@pytest.fixture
def netns():
    """A fresh network namespace (loopback up), held by a sleeping process; its path."""
    if os.geteuid() != 0:
        pytest.skip("creating a network namespace needs root")
    proc = subprocess.Popen(
        ["unshare", "--net", "sh", "-c", "ip link set lo up && echo up && exec sleep 300"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        yield f"/proc/{proc.pid}/ns/net"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


async def test_a_socket_inside_a_namespace_is_served_by_the_sessions_process(policy_url, netns):
    """What adapter-only isolation does per sandbox: the listener's descriptor goes to the
    session's process, which serves that session (and no other) on it."""
    from coding_agent_rl.sandbox.netns import listen_in_netns

    pool = AdapterPool(2, AdapterConfig(sglang_url=policy_url, tokenizer="qwen3"))
    await pool.start()
    try:
        mine, other = f"mine-{uuid.uuid4().hex}", f"other-{uuid.uuid4().hex}"
        await pool.open(mine)
        await pool.open(other)
        assert pool.port_for(mine) != pool.port_for(other)
        port = pool.port_for(mine)
        stop = await pool.serve_socket(listen_in_netns(netns, port), mine)
        probe = (
            "import sys, urllib.request, urllib.error\n"
            "for key in sys.argv[2:]:\n"
            "    req = urllib.request.Request(sys.argv[1], headers={'x-api-key': key})\n"
            "    try:\n"
            "        print(urllib.request.urlopen(req, timeout=10).status)\n"
            "    except urllib.error.HTTPError as e:\n"
            "        print(e.code)\n"
            "    except OSError as e:\n"
            "        print('refused')\n"
        )
        cmd = ["nsenter", f"--net={netns}", sys.executable, "-c", probe]
        cmd += [f"http://127.0.0.1:{port}/v1/models", mine, other]

        def run_probe() -> list[str]:
            return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()

        assert await asyncio.to_thread(run_probe) == ["200", "401"]
        await stop()
        assert await asyncio.to_thread(run_probe) == ["refused", "refused"]
    finally:
        await pool.stop()


PARENT = """
import asyncio, sys, time
from coding_agent_rl.adapter.pool import AdapterPool

async def main():
    pool = AdapterPool(2, sglang_url="http://127.0.0.1:9", tokenizer="qwen3")
    await pool.start()
    print(" ".join(map(str, pool.pids())), flush=True)
    await asyncio.sleep(300)

asyncio.run(main())
"""


def test_a_killed_parent_leaves_no_adapter_process():
    """SIGKILL of the process holding the pool: its adapter processes exit on their own."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(map(alive, pids))
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 20
        while any(map(alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(alive, pids)), [p for p in pids if alive(p)]
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_a_pool_needs_a_tokenizer_spec_and_a_process(tokenizer):
    with pytest.raises(ValueError, match="tokenizer spec"):
        AdapterPool(2, AdapterConfig(sglang_url="http://127.0.0.1:9", tokenizer=tokenizer))
    with pytest.raises(ValueError, match="at least one"):
        AdapterPool(0, sglang_url="http://127.0.0.1:9")
