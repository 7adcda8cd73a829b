"""The adapter on its own event loop in a background thread (how slime's process hosts it),
opened, read and closed from another loop/thread."""

from __future__ import annotations

from support.adapter_clients import BASH, anthropic_reply, post

from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.policy.server import PolicyServer


async def test_adapter_in_background_thread(renderer):
    policy = PolicyServer(ScriptedPolicy({"steps": [{"shell": "ls"}]}), renderer.tokenizer)
    policy_url = await policy.start()
    adapter = AdapterServer(AdapterConfig(sglang_url=policy_url, renderer=renderer))
    url = adapter.start_in_thread("127.0.0.1", 0)
    try:
        assert adapter._thread is not None and adapter._thread.is_alive()
        adapter.sessions.open("t1", max_turns=5)
        body = {
            "model": "m",
            "max_tokens": 100,
            "tools": [BASH],
            "messages": [{"role": "user", "content": "list"}],
        }
        status, _, text = await post(f"{url}/v1/messages", body, sid="t1")
        assert status == 200
        assert anthropic_reply(text, False)["content"][0]["input"] == {"command": "ls"}
        # The turn is recorded just after the reply is written, on the adapter's own thread.
        assert await adapter.sessions.settled("t1", timeout=5)
        (turn,) = adapter.sessions.turns("t1")
        assert turn.session_id == "t1" and turn.index == 0
        adapter.sessions.close("t1")
        assert (await post(f"{url}/v1/messages", body, sid="t1"))[0] == 503
        assert [t.index for t in adapter.sessions.pop("t1")] == [0]
        assert "t1" not in adapter.sessions
    finally:
        adapter.stop_thread()
        await policy.stop()
    assert adapter._thread is None
