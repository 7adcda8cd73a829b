"""The scripted policy behind the SGLang-compatible CPU server, over real HTTP with the real
Qwen3 tokenizer: tool detection per agent CLI, per-session steps, rules, finish reasons."""

from __future__ import annotations

import json

import aiohttp
import pytest

from coding_agent_rl.model.parsers import parse_assistant
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.policy.server import PolicyServer


def fn(name: str, props: dict) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": props},
        },
    }


CLAUDE_TOOLS = [
    fn("Read", {"file_path": {"type": "string"}}),
    fn("Bash", {"command": {"type": "string"}, "timeout": {"type": "number"}}),
]
CODEX_TOOLS = [
    fn("exec_command", {"cmd": {"type": "string"}, "workdir": {"type": "string"}}),
    fn("write_stdin", {"chars": {"type": "string"}}),
]
CODEX_SHELL = [fn("shell", {"command": {"type": "array", "items": {"type": "string"}}})]
MINI_SWE = [fn("bash", {"command": {"type": "string"}})]


@pytest.fixture
async def serve(tokenizer):
    servers = []

    async def start(script: dict, tool_parser: str = "qwen25"):
        server = PolicyServer(ScriptedPolicy(script), tokenizer, tool_parser)
        url = await server.start()
        servers.append(server)
        return url

    yield start
    for server in servers:
        await server.stop()


async def generate(url: str, input_ids: list[int], session: str = "s1", **sampling) -> dict:
    body = {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": 256, **sampling},
        "return_logprob": True,
        "rid": "r1",
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/generate", json=body, headers={"X-SMG-Routing-Key": session}) as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.json()


def prompt(renderer, tools, text="do the task") -> list[int]:
    return renderer.render(
        [{"role": "system", "content": "sys"}, {"role": "user", "content": text}], tools
    )


def parsed(tokenizer, out: dict, tools, tool_parser="qwen25") -> dict:
    text = tokenizer.decode(out["output_ids"], skip_special_tokens=False)
    return parse_assistant(text, tools, tool_parser=tool_parser).message


@pytest.mark.parametrize(
    ("tools", "call"),
    [
        (CLAUDE_TOOLS, ("Bash", {"command": "ls -la"})),
        (CODEX_TOOLS, ("exec_command", {"cmd": "ls -la"})),
        (CODEX_SHELL, ("shell", {"command": ["bash", "-lc", "ls -la"]})),
        (MINI_SWE, ("bash", {"command": "ls -la"})),
    ],
    ids=["claude-code", "codex", "codex-shell-argv", "mini-swe-agent"],
)
async def test_shell_step_uses_the_offered_shell_tool(serve, renderer, tokenizer, tools, call):
    url = await serve({"steps": [{"shell": "ls -la"}]})
    out = await generate(url, prompt(renderer, tools))
    message = parsed(tokenizer, out, tools)
    assert message["tool_calls"] == [
        {"type": "function", "function": {"name": call[0], "arguments": call[1]}}
    ]
    meta = out["meta_info"]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert out["output_ids"][-1] == end
    assert meta["finish_reason"] == {"type": "stop", "matched": end}
    pairs = meta["output_token_logprobs"]
    assert [p[1] for p in pairs] == out["output_ids"]
    assert all(p[0] <= 0 for p in pairs)
    # The ids are the tokenizer's own encoding of the text.
    text = tokenizer.decode(out["output_ids"][:-1], skip_special_tokens=False)
    assert tokenizer.encode(text, add_special_tokens=False) == out["output_ids"][:-1]


async def test_no_shell_tool_gives_text(serve, renderer, tokenizer):
    url = await serve({"steps": [{"shell": "ls"}]})
    out = await generate(url, prompt(renderer, [fn("Read", {"file_path": {"type": "string"}})]))
    assert "no shell tool" in parsed(tokenizer, out, None)["content"]


async def test_steps_are_per_session_then_final(serve, renderer, tokenizer):
    url = await serve({"steps": [{"say": "one"}, {"say": "two"}], "final": "bye"})
    ids = prompt(renderer, MINI_SWE)
    texts = []
    for session in ("a", "a", "b", "a", "b"):
        texts.append(parsed(tokenizer, await generate(url, ids, session), None)["content"])
    assert texts == ["one", "two", "one", "bye", "two"]


async def test_rules_take_precedence(serve, renderer, tokenizer):
    script = {
        "steps": [{"say": "main-1"}, {"say": "main-2"}],
        "rules": [
            {"match": "^compact", "say": "summary", "times": 1},
            {"match_prompt": "SUBAGENT", "steps": [{"say": "sub-1"}, {"say": "sub-2"}]},
        ],
    }
    url = await serve(script)

    async def ask(text):
        out = await generate(url, prompt(renderer, None, text))
        return parsed(tokenizer, out, None)["content"]

    assert await ask("compact the history") == "summary"
    assert await ask("compact the history") == "main-1"  # the rule is used up
    assert await ask("SUBAGENT task") == "sub-1"
    assert await ask("SUBAGENT again") == "sub-2"
    assert await ask("SUBAGENT third") == "main-2"


async def test_tool_step_think_and_xml_format(serve, renderer, tokenizer):
    tools = [fn("Write", {"file_path": {"type": "string"}, "content": {"type": "string"}})]
    args = {"file_path": "a.py", "content": "print(1)\n"}
    url = await serve(
        {"steps": [{"tool": {"name": "Write", "arguments": args}, "think": "Write it."}]},
        tool_parser="qwen3_coder",
    )
    out = await generate(url, prompt(renderer, tools))
    text = tokenizer.decode(out["output_ids"], skip_special_tokens=False)
    assert text.startswith("<think>\nWrite it.\n</think>\n\n<tool_call>\n<function=Write>")
    message = parsed(tokenizer, out, tools, "qwen3_coder")
    assert message["reasoning_content"] == "Write it."
    assert message["tool_calls"][0]["function"]["arguments"] == args


async def test_max_new_tokens_cuts_with_length(serve, renderer, tokenizer):
    url = await serve({"steps": [{"say": "a fairly long answer that takes many tokens"}]})
    out = await generate(url, prompt(renderer, None), max_new_tokens=3)
    assert len(out["output_ids"]) == 3
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") not in out["output_ids"]


async def test_server_routes(serve, renderer):
    url = await serve({"steps": []})
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/health") as resp:
            assert resp.status == 200
        async with http.get(f"{url}/model_info") as resp:
            assert (await resp.json())["policy"] == "scripted"
        async with http.post(f"{url}/abort_request", json={"rid": "nope"}) as resp:
            assert resp.status == 200
        async with http.post(f"{url}/abort_request", json={"abort_all": True}) as resp:
            assert resp.status == 200
        async with http.post(f"{url}/abort_request", json={}) as resp:
            assert resp.status == 400  # neither a rid nor abort_all: not "abort everything"
        async with http.get(f"{url}/v1/loads") as resp:
            assert (await resp.json())["loads"][0]["num_running_reqs"] == 0
        async with http.post(f"{url}/generate", json={"input_ids": [[1], [2]]}) as resp:
            assert resp.status == 400
        body = {"input_ids": prompt(renderer, None), "sampling_params": {}}
        async with http.post(f"{url}/generate", json=body) as resp:
            assert "output_token_logprobs" not in (await resp.json())["meta_info"]


def test_bad_scripts_are_rejected(tmp_path):
    for script in (
        {"steps": [{"shell": "a", "say": "b"}]},
        {"steps": [{"tool": "x"}]},
        {"rules": [{"say": "no match key"}]},
        ["not", "an", "object"],
    ):
        with pytest.raises(ValueError):
            ScriptedPolicy(script)
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"steps": [{"say": "hi"}]}))
    assert ScriptedPolicy.from_file(path).steps == [{"say": "hi"}]
