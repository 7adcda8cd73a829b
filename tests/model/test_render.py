"""Rendering with the real Qwen3 vocabulary and our template: full render, and incremental
``extend`` on stored tokens, which must equal the full render of canonical histories."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coding_agent_rl.model.render import Renderer
from coding_agent_rl.tokenizer import load_tokenizer, qwen3_chat_template

IM_START, IM_END, NL = 151644, 151645, 198
TOOL_CALL, TOOL_CALL_END, TOOL_RESP, TOOL_RESP_END = 151657, 151658, 151665, 151666
THINK, THINK_END = 151667, 151668
ASSISTANT = 77091  # "assistant"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "Bash",
            "description": "Run a shell command.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "Read",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}},
        },
    },
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("qwen3")


@pytest.fixture(scope="module")
def rend(tok):
    return Renderer(tok)


def call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def assistant(content="", reasoning=None, calls=()) -> dict:
    message = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool(content: str) -> dict:
    return {"role": "tool", "content": content}


def replay(rend: Renderer, steps, tools, finishes=None) -> list[int]:
    """Drive ``extend`` like the adapter does: first turn rendered in full, then each assistant
    turn's canonical output tokens are stored and only the new messages are rendered."""
    head, *rest = steps
    history = list(head)
    prompt = rend.render(history, tools)
    for i, (reply, new) in enumerate(rest):
        output = rend.canonical_output(reply)
        finish = (finishes or {}).get(i, "stop")
        if finish == "length":
            output = output[:-1]  # a length finish has no stop token
        history += [reply, *new]
        prompt = rend.extend(prompt + output, finish, new, tools)
        assert prompt == rend.render(history, tools), f"turn {i}"
    return prompt


def test_our_template_renders_like_transformers(tok, rend):
    msgs = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix it."},
        assistant("Looking.", "plan: read", [call("Read", file_path="/a.py")]),
        tool("print(1)"),
    ]
    for tools in (TOOLS, None):
        expected = tok.apply_chat_template(
            msgs, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert rend.render(msgs, tools) == expected


def test_template_structure(rend):
    msgs = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Q"},
        assistant("A", "R", [call("Bash", command="ls"), call("Read", file_path="/x")]),
        tool("out1"),
        tool("out2"),
    ]
    text = rend.text(msgs, TOOLS)
    assert text.startswith("<|im_start|>system\nSYS\n\n# Tools\n")
    assert "<tools>\n" + '{"type": "function", "function": {"name": "Bash"' in text
    assert "<|im_start|>assistant\n<think>\nR\n</think>\n\nA\n<tool_call>\n" in text
    assert '{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>\n<tool_call>' in text
    # two tool results of one step: ONE user turn
    assert text.count("<|im_start|>user") == 2
    assert (
        "<|im_start|>user\n<tool_response>\nout1\n</tool_response>\n"
        "<tool_response>\nout2\n</tool_response><|im_end|>\n"
    ) in text
    assert text.endswith("<|im_start|>assistant\n")
    ids = rend.render(msgs, TOOLS)
    for token in (TOOL_CALL, TOOL_CALL_END, TOOL_RESP, TOOL_RESP_END, THINK, THINK_END):
        assert token in ids
    assert rend.count(msgs, TOOLS) == len(ids)
    assert rend.stop_token_ids == [IM_END, 151643]


def test_historical_reasoning_is_kept(rend):
    """Our rule (unlike Qwen3's template): every assistant turn keeps its <think> block."""
    old = assistant("first", "old thoughts", [call("Bash", command="a")])
    msgs = [{"role": "user", "content": "q1"}, old, tool("r"), {"role": "user", "content": "q2"}]
    assert "<think>\nold thoughts\n</think>\n\nfirst" in rend.text(msgs, TOOLS)


def test_enable_thinking_false(tok):
    rend = Renderer(tok, template_kwargs={"enable_thinking": False})
    text = rend.text([{"role": "user", "content": "q"}], None)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    steps = [
        [{"role": "user", "content": "q"}],
        (assistant("ok", calls=[call("Bash", command="ls")]), [tool("a")]),
        (assistant("done"), [{"role": "user", "content": "thanks"}]),
    ]
    replay(rend, steps, TOOLS)


def test_incremental_equals_full_on_a_multi_turn_session(rend):
    steps = [
        [{"role": "system", "content": "You are Claude Code."}, {"role": "user", "content": "Fix"}],
        (
            assistant("Let me look.", "Start by reading.", [call("Read", file_path="/r/a.py")]),
            [tool("     1\tdef f():\n     2\t    return 1\n")],
        ),
        # several tool results in one step
        (
            assistant(
                "", None, [call("Bash", command="ls"), call("Bash", command="pwd", timeout=5)]
            ),
            [tool("a.py\nb.py"), tool("/repo")],
        ),
        # tool result followed by a system reminder folded into a user message
        (
            assistant("Running tests.", None, [call("Bash", command="pytest -q")]),
            [
                tool("1 failed"),
                {"role": "user", "content": "<system-reminder>todo</system-reminder>"},
            ],
        ),
        (assistant("Fixed.", "The test passes now."), [{"role": "user", "content": "Thanks! 🎉"}]),
        # reasoning in the latest turn
        (assistant("Bye", "nothing left to do\n\n"), [{"role": "user", "content": "more?"}]),
    ]
    final = replay(rend, steps, TOOLS)
    assert final[-3:] == [IM_START, ASSISTANT, NL]  # "<|im_start|>assistant\n"


def test_length_finish_gets_its_turn_closed(rend):
    steps = [
        [{"role": "user", "content": "go"}],
        (assistant("partial answer that was cut"), [{"role": "user", "content": "continue"}]),
        (assistant("", None, [call("Bash", command="ls")]), [tool("x")]),
    ]
    replay(rend, steps, TOOLS, finishes={0: "length"})
    prefix = rend.render([{"role": "user", "content": "go"}], None)
    assert rend.closing_ids([*prefix, 9707], "length") == [IM_END, NL]
    assert rend.closing_ids([*prefix, 9707, IM_END], "stop") == [NL]
    # stopped on <|endoftext|> instead of <|im_end|>: the turn is closed, nothing is removed
    assert rend.closing_ids([*prefix, 9707, 151643], "stop") == [IM_END, NL]


def test_extend_keeps_stored_tokens_verbatim(rend):
    """Non-canonical sampled tokens (e.g. "Hello" spelled as single letters) are kept."""
    prompt = rend.render([{"role": "user", "content": "hi"}], TOOLS)
    odd_output = [39, 68, 75, 75, 78, IM_END]  # H e l l o, not the canonical [9707]
    ids = rend.extend(prompt + odd_output, "stop", [{"role": "user", "content": "again"}], TOOLS)
    assert ids[: len(prompt) + len(odd_output)] == prompt + odd_output
    assert ids[len(prompt) + len(odd_output)] == NL


def test_extend_refuses_assistant_messages(rend):
    with pytest.raises(ValueError, match="assistant"):
        rend.extend([IM_START], "stop", [assistant("x")], None)


def test_delta_does_not_depend_on_tools_for_our_template(rend):
    assert rend._delta_needs_tools is False


def test_template_whose_turns_depend_on_tools_still_extends_exactly(tok):
    source = qwen3_chat_template().replace(
        "{{- '\\n<tool_response>\\n' + text(message.content)",
        "{{- '\\n<tool_response>' + ((tools or []) | length | string) + '\\n' + text(message.content)",
    )
    assert source != qwen3_chat_template()
    rend = Renderer(tok, chat_template=source)
    assert rend._delta_needs_tools is True
    steps = [
        [{"role": "user", "content": "go"}],
        (assistant("", None, [call("Bash", command="ls")]), [tool("x"), tool("y")]),
    ]
    replay(rend, steps, TOOLS)


def test_generation_tags_of_hf_templates_are_accepted(tok, rend):
    source = qwen3_chat_template().replace(
        "{{- content -}}", "{% generation %}{{- content -}}{% endgeneration %}"
    )
    assert source != qwen3_chat_template()
    msgs = [{"role": "user", "content": "q"}, assistant("a", "r", [call("Bash", command="x")])]
    assert Renderer(tok, chat_template=source).render(msgs, TOOLS) == rend.render(msgs, TOOLS)


def test_template_without_special_token_turns_is_rejected(tok):
    plain = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    with pytest.raises(ValueError, match="special token"):
        Renderer(tok, chat_template=plain)


def test_xml_tool_call_format(tok):
    rend = Renderer(tok, template_kwargs={"tool_call_format": "xml"})
    msg = assistant("ok", None, [call("Bash", command="ls -la", timeout=30)])
    text = rend.text([{"role": "user", "content": "q"}, msg], TOOLS, add_generation_prompt=False)
    assert (
        "ok\n<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n</parameter>\n"
        "<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call><|im_end|>"
    ) in text
    assert "<function=function-name>" in text  # the system prompt describes the XML format
    replay(rend, [[{"role": "user", "content": "q"}], (msg, [tool("files")])], TOOLS)


# ---- property: extend == render over random canonical histories ---------------------------

# Leading/trailing whitespace and markup are over-represented: joins are where tokens drift.
_edge = st.sampled_from(["", "", " ", "\n", "\n\n", "\t", " \n", "\r\n"])
_text = st.builds(
    lambda pre, body, post: pre + body + post,
    _edge,
    st.one_of(
        st.text(alphabet=st.sampled_from(list(" \n\t{}<>/\"'.:_a1é中🤖")), max_size=30),
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30),
    ),
    _edge,
)
_args = st.dictionaries(
    st.sampled_from(["command", "file_path", "timeout", "flags", "x"]),
    st.one_of(
        _text, st.integers(-(10**6), 10**6), st.booleans(), st.none(), st.lists(_text, max_size=3)
    ),
    max_size=3,
)
_call = st.builds(lambda n, a: call(n, **a), st.sampled_from(["Bash", "Read", "Other"]), _args)
_assistant = st.builds(
    lambda c, r, calls: assistant(c, r, calls),
    _text,
    st.one_of(st.none(), _text),
    st.lists(_call, max_size=3),
)
_new = st.one_of(
    st.lists(st.builds(tool, _text), min_size=1, max_size=3),
    st.builds(lambda t: [{"role": "user", "content": t}], _text),
    st.builds(
        lambda ts, u: [*map(tool, ts), {"role": "user", "content": u}],
        st.lists(_text, min_size=1, max_size=2),
        _text,
    ),
)
_history = st.tuples(
    st.one_of(st.none(), _text),
    _text,
    st.lists(
        st.tuples(_assistant, _new, st.sampled_from(["stop", "stop", "length"])),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_history)
def test_property_extend_equals_full_render(rend, history):
    system, first_user, turns, with_tools = history
    head = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": first_user}
    ]
    tools = TOOLS if with_tools else None
    finishes = {i: finish for i, (_, _, finish) in enumerate(turns)}
    replay(rend, [head, *[(a, new) for a, new, _ in turns]], tools, finishes)
