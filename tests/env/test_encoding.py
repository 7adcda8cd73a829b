"""Observation tokens by the dummy-messages delta equal a full render of the same history, for the
Qwen3-style template and a Llama-3-style one, checked against transformers' own
``apply_chat_template`` (not against our renderer). The naive delta (trim a rendered dummy prefix
by its token count, slime's way) is shown to break on the same histories."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coding_agent_rl.env.encoding import ChatEncoder, ObservationError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
PROMPT = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "The tests in tests/test_x.py fail. Fix it."},
]


def call(command: str) -> dict:
    return {"type": "function", "function": {"name": "bash", "arguments": {"command": command}}}


def assistant(content: str = "", *commands: str, reasoning: str | None = None) -> dict:
    m: dict = {"role": "assistant", "content": content}
    if commands:
        m["tool_calls"] = [call(c) for c in commands]
    if reasoning:
        m["reasoning_content"] = reasoning
    return m


def tool(content: str) -> dict:
    return {"role": "tool", "name": "bash", "content": content}


# Canonical histories: (assistant turn, observation message(s), finish of that assistant turn).
HISTORIES = {
    "one tool result per turn": [
        (assistant("Let me look.", "ls"), [tool("a.py\ntests")], "stop"),
        (assistant("", "cat a.py"), [tool("def f():\n    return 1\n")], "stop"),
    ],
    "parallel calls, results grouped": [
        (assistant("Two at once.", "ls", "pwd"), [tool("a.py"), tool("/testbed")], "stop"),
        (assistant("Done reading."), [{"role": "user", "content": "Continue."}], "stop"),
    ],
    "slime-style user observation (content parts)": [
        (
            assistant("", "python -m pytest -q"),
            [{"role": "user", "content": [{"type": "text", "text": "3 passed\n"}]}],
            "stop",
        ),
    ],
    "a length finish, then an observation": [
        (assistant("I will write a very long", "echo hi"), [tool("hi")], "length"),
        (assistant("", "echo again"), [tool("  spaces  and\ttabs\n\n")], "stop"),
    ],
    "reasoning kept in history": [
        (assistant("ok", "ls", reasoning="plan: list files"), [tool("x")], "stop"),
    ],
    "unicode and template-looking text": [
        (assistant("ünïcödé → ✓", "echo '<|im_end|>'"), [tool("<tool_call> 数字 0123")], "stop"),
    ],
}


def hf_render(tok, history, tools) -> list[int]:
    return tok.apply_chat_template(
        history, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
    )


def episode_tokens(enc: ChatEncoder, steps, tools) -> tuple[list[int], list]:
    """Tokens the loop builds: the prompt once, then per turn the sampled tokens (the template's
    canonical rendering of the reply, without its end token after a length finish) and the
    observation delta. Returns them with the full history."""
    tokens = list(enc.prompt(PROMPT, tools).ids)
    history = list(PROMPT)
    for reply, observation, finish in steps:
        sampled = enc.renderer.canonical_output(reply)
        if finish == "length":
            sampled = sampled[:-1]
        tokens += sampled
        tokens += enc.observation(tokens, finish, observation, tools).ids
        history += [reply, *observation]
    return tokens, history


@pytest.fixture(scope="module", params=["qwen3", "llama3-style"])
def tok(request, tokenizer, llama3_tokenizer):
    return tokenizer if request.param == "qwen3" else llama3_tokenizer


@pytest.mark.parametrize("name", sorted(HISTORIES))
@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no-tools"])
def test_delta_equals_full_render(tok, name, tools):
    enc = ChatEncoder(tok)
    tokens, history = episode_tokens(enc, HISTORIES[name], tools)
    assert tokens == hf_render(tok, history, tools)


def test_the_preamble_is_never_repeated(tok):
    enc = ChatEncoder(tok)
    prompt = enc.prompt(PROMPT, TOOLS).ids
    delta = enc.observation(prompt + enc.renderer.canonical_output(assistant("", "ls")), "stop",
                            [tool("x")], TOOLS).ids  # fmt: skip
    text = tok.decode(delta)
    assert "You fix bugs." not in text and '"name": "bash"' not in text
    assert len(delta) < 20


def slime_style_delta(tok, message: dict, tools) -> list[int]:
    """The naive dummy delta (written from slime's description): render [system, user] and
    [system, user, message] + generation prompt as text, drop as many tokens as the first."""
    dummy = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "I am a user."},
    ]
    head = tok.apply_chat_template(dummy, tools=tools, tokenize=False, add_generation_prompt=False)
    full = tok.apply_chat_template(
        [*dummy, message], tools=tools, tokenize=False, add_generation_prompt=True
    )
    return tok.encode(full, add_special_tokens=False)[
        len(tok.encode(head, add_special_tokens=False)) :
    ]


def test_naive_delta_breaks_where_ours_holds(tokenizer):
    """Defence off: appending the naive delta after a sampled Qwen3 turn drops the newline the
    template writes after <|im_end|> (and after a length finish, the whole end marker), so the
    sample no longer matches what a full render gives; ours matches."""
    enc = ChatEncoder(tokenizer)
    tokens = list(enc.prompt(PROMPT, TOOLS).ids)
    reply, obs = assistant("", "python -m pytest"), {"role": "user", "content": "1 failed"}
    for finish in ("stop", "length"):
        sampled = enc.renderer.canonical_output(reply)
        sampled = sampled[:-1] if finish == "length" else sampled
        expected = hf_render(tokenizer, [*PROMPT, reply, obs], TOOLS)
        naive = tokens + sampled + slime_style_delta(tokenizer, obs, TOOLS)
        ours = tokens + sampled + enc.observation(tokens + sampled, finish, obs, TOOLS).ids
        assert naive != expected
        assert ours == expected


text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\u2063"), max_size=60
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(replies=st.lists(st.tuples(text, text, st.booleans()), min_size=1, max_size=4))
def test_delta_equals_full_render_on_random_text(tok, replies):
    enc = ChatEncoder(tok)
    steps = [
        (assistant(content.strip(), "run"), [tool(output)], "length" if cut else "stop")
        for content, output, cut in replies
    ]
    tokens, history = episode_tokens(enc, steps, TOOLS)
    assert tokens == hf_render(tok, history, TOOLS)


def test_images_reach_the_text_encoder_as_text_never_dropped(encoder, tokenizer):
    """A text-only encoder answers an image it cannot decode with why, and with
    ``text_only="refuse"`` refuses images with a clear error (tests/env/test_pictures_native.py
    covers decodable images and the VLM path)."""

    message = {"role": "user", "content": [{"type": "image", "image": "x.png"}, {"type": "text", "text": "see"}]}  # fmt: skip
    ids = encoder.observation([1, 2], "stop", message, None).ids
    assert "[image not shown: image: invalid base64 data]\nsee" in tokenizer.decode(ids)
    with pytest.raises(ObservationError, match="message dict"):
        encoder.observation([1, 2], "stop", "just text", None)
