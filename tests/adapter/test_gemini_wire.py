"""Gemini ``generateContent`` / ``streamGenerateContent?alt=sse`` over real HTTP against the
scripted CPU policy (real Qwen3 tokenizer): multi-turn tool calls extend the recorded tokens
exactly, thoughts are reasoning, malformed fields are a 400 in Google's error shape, the key
travels in ``x-goog-api-key`` and is checked before the body, and the small routes
(``countTokens``, the model listing) answer what the CLI expects."""

from __future__ import annotations

import base64
import itertools
import json

import pytest
from support.adapter_clients import gemini_follow_up, gemini_reply, post, recorded
from support.vision_helpers import png

from coding_agent_rl.adapter.sessions import new_session_id
from coding_agent_rl.model.parsers import format_tool_calls

SCRIPT = {
    "steps": [
        {"shell": "ls", "think": "Look around first."},
        {"shell": "cat a.txt"},
        {"say": "Finished: the file says hi."},
    ]
}
SHELL = {
    "name": "run_shell_command",
    "description": "Run a shell command.",
    "parametersJsonSchema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
PATH = "/v1beta/models/{model}:{method}"


def url_of(base: str, method: str, model: str = "policy") -> str:
    suffix = "?alt=sse" if method == "streamGenerateContent" else ""
    return base + PATH.format(model=model, method=method) + suffix


async def gpost(url: str, body, *, key: str | None = "s1", raw: bytes | None = None):
    headers = {"x-goog-api-key": key} if key else {}
    return await post(url, body, sid=None, raw=raw, headers=headers)


def first_body() -> dict:
    return {
        "systemInstruction": {"parts": [{"text": "You are terse."}]},
        "tools": [{"functionDeclarations": [SHELL]}, {"googleSearch": {}}],
        "generationConfig": {
            "temperature": 1,
            "topP": 0.95,
            "topK": 64,
            "maxOutputTokens": 512,
            "thinkingConfig": {"includeThoughts": True},
        },
        "contents": [{"role": "user", "parts": [{"text": "<ctx>"}, {"text": "Read a.txt"}]}],
    }


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_gemini_multi_turn_is_token_exact(scripted_stack, renderer, stream):
    adapter, _, url = await scripted_stack(SCRIPT)
    adapter.sessions.open("s1")
    method = "streamGenerateContent" if stream else "generateContent"
    body = first_body()
    status, ctype, text = await gpost(url_of(url, method, "gemini-2.5-pro"), body)
    assert status == 200, text
    assert ctype.startswith("text/event-stream" if stream else "application/json")
    reply = gemini_reply(text, stream)
    cand = reply["candidates"][0]
    assert cand["finishReason"] == "STOP" and reply["modelVersion"] == "gemini-2.5-pro"
    assert cand["content"]["parts"] == [
        {"text": "Look around first.", "thought": True},
        {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}},
    ]
    for results in (["a.txt\n"], ["hi"]):
        body = gemini_follow_up(body, reply, results)
        status, _, text = await gpost(url_of(url, method), body)
        assert status == 200, text
        reply = gemini_reply(text, stream)
    assert reply["candidates"][0]["content"]["parts"] == [{"text": "Finished: the file says hi."}]

    turns = await recorded(adapter, "s1")
    assert [t.index for t in turns] == [0, 1, 2]
    assert [t.parent for t in turns] == [None, 0, 1]  # each turn continued the stored tokens
    for prev, turn in itertools.pairwise(turns):
        head = prev.prompt_ids + prev.output_ids
        assert turn.prompt_ids[: len(head)] == head
    for turn in turns:
        assert turn.wire == "gemini" and turn.finish_reason == "stop"
    assert turns[0].prompt_ids == renderer.render(turns[0].messages, turns[0].tools)
    # Gemini CLI drops thought parts from its history; the stored tokens keep them.
    assert "reasoning_content" not in turns[1].messages[-2]
    assert turns[1].prompt_ids != renderer.render(turns[1].messages, turns[1].tools)
    usage = reply["usageMetadata"]
    assert usage["promptTokenCount"] == len(turns[2].prompt_ids)
    assert usage["candidatesTokenCount"] == len(turns[2].output_ids)
    assert turns[0].assistant["reasoning_content"] == "Look around first."
    assert turns[0].messages[0] == {"role": "system", "content": "You are terse."}
    assert turns[0].messages[1] == {"role": "user", "content": "<ctx>\nRead a.txt"}
    assert turns[2].messages[-1] == {"role": "tool", "name": "run_shell_command", "content": "hi"}
    # googleSearch is a hosted tool the policy cannot run: only the function reached it.
    assert [t["function"]["name"] for t in turns[0].tools] == ["run_shell_command"]


async def test_gemini_several_calls_and_error_results(scripted_stack, renderer):
    two = format_tool_calls(
        [("run_shell_command", {"command": "ls"}), ("run_shell_command", {"command": "pwd"})],
        "qwen25",
    )
    adapter, _, url = await scripted_stack({"steps": [{"say": two}, {"say": "ok"}]})
    adapter.sessions.open("s1")
    body = {"tools": [{"functionDeclarations": [SHELL]}], "contents": [{"parts": [{"text": "go"}]}]}
    reply = gemini_reply((await gpost(url_of(url, "generateContent"), body))[2], False)
    calls = [p["functionCall"]["args"] for p in reply["candidates"][0]["content"]["parts"]]
    assert calls == [{"command": "ls"}, {"command": "pwd"}]
    body = gemini_follow_up(body, reply, ["a.txt", "/work"])
    body["contents"][-1]["parts"][1]["functionResponse"]["response"] = {"error": "denied"}
    status, _, text = await gpost(url_of(url, "generateContent"), body)
    assert status == 200, text
    turns = await recorded(adapter, "s1")
    assert turns[1].parent == 0
    tools = [m for m in turns[1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tools] == ["a.txt", "Error: denied"]


MSG = [{"role": "user", "parts": [{"text": "hi"}]}]
BAD = [
    ({"contents": MSG, "generationConfig": {"maxOutputTokens": "lots"}}, "maxOutputTokens"),
    ({"contents": MSG, "generationConfig": {"maxOutputTokens": 0}}, "maxOutputTokens"),
    ({"contents": MSG, "generationConfig": {"temperature": "hot"}}, "temperature"),
    ({"contents": MSG, "generationConfig": {"topP": 0}}, "topP"),
    ({"contents": MSG, "generationConfig": {"topK": "x"}}, "topK"),
    ({"contents": MSG, "generationConfig": {"stopSequences": [1]}}, "stopSequences"),
    ({"contents": MSG, "generationConfig": {"candidateCount": 2}}, "candidateCount"),
    ({"contents": MSG, "generationConfig": []}, "generationConfig"),
    ({"contents": []}, "contents"),
    ({"contents": "hi"}, "contents"),
    ({"contents": [{"role": "system", "parts": []}]}, "contents[0].role"),
    ({"contents": [{"role": "user", "parts": "hi"}]}, "contents[0].parts"),
    ({"contents": [{"role": "user", "parts": [7]}]}, "contents[0].parts[0]"),
    ({"contents": [{"role": "user", "parts": [{"text": 7}]}]}, "text"),
    ({"contents": [{"role": "model", "parts": [{"functionCall": "ls"}]}, *MSG]}, "functionCall"),
    (
        {"contents": [{"role": "model", "parts": [{"functionCall": {"name": "x", "args": []}}]}]},
        "args",
    ),
    (
        {"contents": [{"role": "user", "parts": [{"functionResponse": {"response": "x"}}]}]},
        "functionResponse.response",
    ),
    ({"contents": [{"role": "user", "parts": [{"inlineData": {"data": 3}}]}]}, "inlineData"),
    ({"contents": MSG, "tools": {"functionDeclarations": []}}, "tools"),
    ({"contents": MSG, "tools": [{"functionDeclarations": "x"}]}, "functionDeclarations"),
    ({"contents": MSG, "systemInstruction": 5}, "systemInstruction"),
]


@pytest.mark.parametrize(("body", "names"), BAD)
@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent", "countTokens"])
async def test_malformed_fields_are_a_400_in_googles_shape(scripted_stack, body, names, method):
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("agent-key")
    status, ctype, text = await gpost(url_of(url, method), body, key="agent-key")
    assert status == 400, text
    assert ctype.startswith("application/json")
    err = json.loads(text)["error"]
    assert err["code"] == 400 and err["status"] == "INVALID_ARGUMENT"
    assert names in err["message"], err
    assert adapter.sessions.errors("agent-key") == []
    assert adapter.sessions.turns("agent-key") == []


async def test_malformed_json_and_stream_without_sse(scripted_stack):
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("s1")
    status, _, text = await gpost(url_of(url, "generateContent"), None, raw=b"{nope")
    assert status == 400 and json.loads(text)["error"]["status"] == "INVALID_ARGUMENT"
    plain = url + PATH.format(model="policy", method="streamGenerateContent")
    status, _, text = await gpost(plain, {"contents": MSG})
    assert status == 400 and "alt=sse" in json.loads(text)["error"]["message"]
    status, _, text = await gpost(url_of(url, "embedContent"), {"contents": MSG})
    assert status == 404 and json.loads(text)["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent", "countTokens"])
async def test_the_key_is_checked_before_the_body(scripted_stack, method):
    adapter, _, url = await scripted_stack({"steps": [{"say": "ok"}]})
    sid = new_session_id()
    adapter.sessions.open(sid)
    for key in (None, "not-a-session", sid[:-1]):
        # A body that is not even JSON: a 401 shows it was never parsed.
        status, _, text = await gpost(url_of(url, method), None, key=key, raw=b"{nope")
        assert status == 401, text
        assert json.loads(text)["error"] == {
            "code": 401,
            "message": json.loads(text)["error"]["message"],
            "status": "UNAUTHENTICATED",
        }
    status, _, text = await gpost(url_of(url, method), {"contents": MSG}, key=sid)
    assert status == 200, text


async def test_refusals_tell_gemini_cli_whether_to_retry(scripted_stack):
    """Gemini CLI classifies a 429 by its message: ``limit: 0`` is terminal, ``Please retry in
    Ns`` waits N s; the turn cap must be terminal or the CLI retries it for minutes."""
    adapter, _, url = await scripted_stack({"steps": [{"say": "ok"}, {"say": "ok"}]})
    adapter.sessions.open("s1", max_turns=1)
    body = {"contents": MSG}
    assert (await gpost(url_of(url, "generateContent"), body))[0] == 200
    await recorded(adapter, "s1")
    status, _, text = await gpost(url_of(url, "streamGenerateContent"), body)
    err = json.loads(text)["error"]
    assert status == 429 and err["status"] == "RESOURCE_EXHAUSTED"
    assert "limit: 0" in err["message"].lower()


async def test_count_tokens_and_model_listing(scripted_stack, renderer):
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("s1")
    body = first_body()
    status, _, text = await gpost(url_of(url, "countTokens"), body)
    assert status == 200, text
    from coding_agent_rl.adapter.gemini import Gemini

    req = Gemini().parse(body)
    assert json.loads(text) == {"totalTokens": renderer.count(req.messages, req.tools)}
    wrapped = {"generateContentRequest": {"model": "models/policy", **body}}
    assert json.loads((await gpost(url_of(url, "countTokens"), wrapped))[2]) == json.loads(text)

    import aiohttp

    async with aiohttp.ClientSession(headers={"x-goog-api-key": "s1"}) as http:
        async with http.get(url + "/v1beta/models") as resp:
            listing = await resp.json()
        async with http.get(url + "/v1beta/models/gemini-2.5-pro") as resp:
            one = await resp.json()
    async with aiohttp.ClientSession() as http, http.get(url + "/v1beta/models") as resp:
        assert resp.status == 401
    (model,) = listing["models"]
    assert "generateContent" in model["supportedGenerationMethods"]
    assert one["name"] == "models/gemini-2.5-pro"


async def test_inline_images_reach_the_multimodal_path(scripted_stack, tokenizer):
    """A text-only policy reads the placeholder naming the image, in a user part and inside a
    function response (Gemini CLI's ``read_file`` of an image)."""
    adapter, _, url = await scripted_stack({"steps": [{"say": "ok"}, {"say": "ok"}]})
    adapter.sessions.open("s1")
    data = base64.b64encode(png(40, 20, (200, 30, 30))).decode()
    inline = {"inlineData": {"mimeType": "image/png", "data": data}}
    body = {"contents": [{"role": "user", "parts": [{"text": "What is this?"}, inline]}]}
    status, _, text = await gpost(url_of(url, "generateContent"), body)
    assert status == 200, text
    body["contents"] += [
        {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]},
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "read_file",
                        "response": {"output": "Binary content of plot.png"},
                        "parts": [inline],
                    }
                }
            ],
        },
    ]
    status, _, text = await gpost(url_of(url, "generateContent"), body)
    assert status == 200, text
    turns = await recorded(adapter, "s1")
    prompt = tokenizer.decode(turns[1].prompt_ids)
    assert prompt.count("40x20") == 2, prompt[-800:]
    assert "Binary content of plot.png" in prompt
