"""Tool-call and reasoning parsers: well-formed, several calls, ill-formed, unknown tools, typed
parameters, and agreement with what our chat template renders (real tokenizer)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coding_agent_rl.model.parsers import (
    TOOL_PARSERS,
    format_tool_calls,
    parse_assistant,
)
from coding_agent_rl.model.render import Renderer
from coding_agent_rl.tokenizer import load_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string"},
        "timeout": {"type": "integer"},
        "ratio": {"type": "number"},
        "force": {"type": "boolean"},
        "options": {"type": "object"},
        "paths": {"type": "array", "items": {"type": "string"}},
        "maybe": {"type": ["integer", "null"]},
        "either": {"anyOf": [{"type": "null"}, {"type": "number"}]},
        "mode": {"enum": ["a", "b"]},
    },
}
TOOLS = [
    {"type": "function", "function": {"name": "Bash", "description": "x", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}},
]


def calls_of(parsed) -> list[tuple[str, dict]]:
    return [
        (c["function"]["name"], c["function"]["arguments"])
        for c in parsed.message.get("tool_calls", [])
    ]


# ---- qwen25 / hermes (JSON) ----------------------------------------------------------------


def test_qwen25_content_reasoning_and_several_calls():
    text = (
        "<think>\nI should list files.\n</think>\n\nLet me check.\n"
        '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "/a.py"}}\n</tool_call>'
    )
    parsed = parse_assistant(text, TOOLS)
    assert not parsed.ill_formed and parsed.errors == []
    assert parsed.message == {
        "role": "assistant",
        "content": "Let me check.",
        "reasoning_content": "I should list files.",
        "tool_calls": [
            {"type": "function", "function": {"name": "Bash", "arguments": {"command": "ls"}}},
            {"type": "function", "function": {"name": "Read", "arguments": {"file_path": "/a.py"}}},
        ],
    }


def test_plain_answer_has_no_tool_calls_key():
    parsed = parse_assistant("Just text.<|im_end|>", TOOLS)
    assert parsed.message == {"role": "assistant", "content": "Just text."}


def test_hermes_without_newlines_and_json_list_and_aliases():
    text = (
        '<tool_call>{"name": "Bash", "parameters": {"command": "a"}}</tool_call>'
        '<tool_call>[{"name": "Read", "arguments": "{\\"file_path\\": \\"/b\\"}"}, '
        '{"name": "Bash", "arguments": null}]</tool_call>'
    )
    parsed = parse_assistant(text, TOOLS, tool_parser="hermes")
    assert calls_of(parsed) == [
        ("Bash", {"command": "a"}),
        ("Read", {"file_path": "/b"}),
        ("Bash", {}),
    ]
    assert parsed.message["content"] == "" and not parsed.ill_formed


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("<tool_call>\n{not json}\n</tool_call>", "not valid JSON"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', "no string 'name'"),
        ('<tool_call>\n{"name": "Bash", "arguments": [1]}\n</tool_call>', "not a JSON object"),
        ('<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}', "without </tool_call>"),
    ],
)
def test_ill_formed_json_calls_are_flagged_and_kept_as_text(block, error):
    good = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ok"}}\n</tool_call>'
    parsed = parse_assistant(f"Trying.\n{good}\n{block}", TOOLS)
    assert parsed.ill_formed
    assert any(error in e for e in parsed.errors), parsed.errors
    assert calls_of(parsed) == [("Bash", {"command": "ok"})]
    assert block in parsed.message["content"]
    assert parsed.message["content"].startswith("Trying.")


def test_unknown_tool_is_left_as_text_and_not_ill_formed():
    block = '<tool_call>\n{"name": "Nope", "arguments": {}}\n</tool_call>'
    parsed = parse_assistant(f"x {block}", TOOLS)
    assert not parsed.ill_formed and "tool_calls" not in parsed.message
    assert parsed.message["content"] == f"x {block}"
    # with no tool list at all, any name is accepted
    assert calls_of(parse_assistant(block, None)) == [("Nope", {})]
    # an empty tool list accepts none
    assert calls_of(parse_assistant(block, [])) == []


def test_unknown_parser_names_are_errors_listing_known_ones():
    with pytest.raises(ValueError, match="qwen3_coder"):
        parse_assistant("x", None, tool_parser="llama9")
    with pytest.raises(ValueError, match="qwen3"):
        parse_assistant("x", None, reasoning_parser="deepseek-r9")
    with pytest.raises(ValueError, match="hermes"):
        format_tool_calls([("a", {})], "nope")


def test_parsers_can_be_switched_off():
    text = "<think>r</think>a<tool_call>\n{}\n</tool_call>"
    parsed = parse_assistant(text, TOOLS, tool_parser=None, reasoning_parser=None)
    assert parsed.message == {"role": "assistant", "content": text}


# ---- qwen3_coder (XML) ---------------------------------------------------------------------


def test_qwen3_coder_values_are_typed_by_the_schema():
    text = (
        "Running.\n<tool_call>\n<function=Bash>\n"
        "<parameter=command>\n\nls -la\n\n</parameter>\n"
        "<parameter=timeout>\n30\n</parameter>\n<parameter=ratio>\n2\n</parameter>\n"
        "<parameter=force>\nTrue\n</parameter>\n"
        '<parameter=options>\n{"a": [1, 2]}\n</parameter>\n'
        "<parameter=paths>\n['x', 'y']\n</parameter>\n"
        "<parameter=maybe>\nnull\n</parameter>\n<parameter=either>\n1.5\n</parameter>\n"
        "<parameter=mode>\n1\n</parameter>\n<parameter=extra>\n42\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    parsed = parse_assistant(text, TOOLS, tool_parser="qwen3_coder")
    assert not parsed.ill_formed, parsed.errors
    assert parsed.message["content"] == "Running."
    assert calls_of(parsed) == [
        (
            "Bash",
            {
                "command": "\nls -la\n",  # exactly one newline stripped on each side
                "timeout": 30,
                "ratio": 2,
                "force": True,
                "options": {"a": [1, 2]},
                "paths": ["x", "y"],
                "maybe": None,
                "either": 1.5,
                "mode": "1",  # enum of strings: stays text
                "extra": "42",  # not in the schema: stays text
            },
        )
    ]


def test_qwen3_coder_value_that_does_not_fit_its_type_stays_text():
    text = (
        "<tool_call>\n<function=Bash>\n<parameter=timeout>\nsoon\n</parameter>\n"
        "<parameter=force>\nmaybe\n</parameter>\n</function>\n</tool_call>"
    )
    parsed = parse_assistant(text, TOOLS, tool_parser="qwen3_coder")
    assert calls_of(parsed) == [("Bash", {"timeout": "soon", "force": "maybe"})]


@pytest.mark.parametrize(
    ("block", "error"),
    [
        (
            "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n</tool_call>",
            "</function>",
        ),
        (
            "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</function>\n</tool_call>",
            "unclosed",
        ),
        ("<tool_call>\nBash(ls)\n</tool_call>", "expected <function="),
        ("<tool_call>\n</tool_call>", "no <function="),
        ("<tool_call>\n<function=Bash>\n<parameter=command>\nls", "without </tool_call>"),
    ],
)
def test_ill_formed_xml_calls(block, error):
    parsed = parse_assistant(f"a {block}", TOOLS, tool_parser="qwen3_coder")
    assert parsed.ill_formed and any(error in e for e in parsed.errors), parsed.errors
    assert "tool_calls" not in parsed.message
    assert parsed.message["content"] == f"a {block}"


def test_qwen3_coder_value_may_contain_function_close_tag():
    text = (
        "<tool_call>\n<function=Bash>\n<parameter=command>\necho '</function>'\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    parsed = parse_assistant(text, TOOLS, tool_parser="qwen3_coder")
    assert calls_of(parsed) == [("Bash", {"command": "echo '</function>'"})]


def test_qwen3_coder_unknown_tool_left_as_text():
    block = "<tool_call>\n<function=Nope>\n</function>\n</tool_call>"
    parsed = parse_assistant(block, TOOLS, tool_parser="qwen3_coder")
    assert not parsed.ill_formed and parsed.message["content"] == block


# ---- reasoning (qwen3) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "started", "reasoning", "content"),
    [
        ("<think>\nabc\n</think>\n\nanswer", False, "abc", "answer"),
        ("<think>\ncut off by length", False, "cut off by length", ""),
        ("no thinking here", False, None, "no thinking here"),
        # the generation prompt already opened <think> (Qwen3 thinking-only templates)
        ("thoughts\n</think>\n\nanswer", False, "thoughts", "answer"),
        ("still thinking", True, "still thinking", ""),
        # a tool call ends reasoning even without </think>
        (
            '<think>plan<tool_call>\n{"name": "Read", "arguments": {}}\n</tool_call>',
            False,
            "plan",
            "",
        ),
        ("<think>\n\n</think>\n\nempty reasoning", False, None, "empty reasoning"),
    ],
)
def test_qwen3_reasoning(text, started, reasoning, content):
    parsed = parse_assistant(text, TOOLS, reasoning_started=started)
    assert parsed.message.get("reasoning_content") == reasoning
    assert parsed.message["content"] == content


def test_tool_call_after_unclosed_think_is_parsed():
    text = (
        '<think>plan<tool_call>\n{"name": "Read", "arguments": {"file_path": "/x"}}\n</tool_call>'
    )
    assert calls_of(parse_assistant(text, TOOLS)) == [("Read", {"file_path": "/x"})]


# ---- formatting, and agreement with the chat template --------------------------------------


@pytest.mark.parametrize(
    ("parser", "fmt"), [("qwen25", "json"), ("hermes", "json"), ("qwen3_coder", "xml")]
)
def test_template_rendering_parses_back_to_the_same_message(parser, fmt):
    """What the template renders for an assistant turn (= what a model in that format emits)
    decodes and parses back to the same canonical message, and equals format_tool_calls."""
    tok = load_tokenizer("qwen3")
    rend = Renderer(tok, template_kwargs={"tool_call_format": fmt})
    args = [
        ("Bash", {"command": "ls 'x y'", "timeout": 5, "force": False, "paths": ["a", "b"]}),
        ("Read", {"file_path": "/ü/中.py"}),
    ]
    message = {
        "role": "assistant",
        "content": "Checking two things.",
        "reasoning_content": "Need the listing first.",
        "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": a}} for n, a in args
        ],
    }
    text = tok.decode(rend.canonical_output(message), skip_special_tokens=True)
    assert text.endswith(format_tool_calls(args, parser))
    parsed = parse_assistant(text, TOOLS, tool_parser=parser)
    assert parsed.message == message and not parsed.ill_formed


_value = st.one_of(
    st.text(max_size=20).filter(
        lambda s: "</parameter>" not in s and "</tool_call>" not in s and s.lower() != "null"
    ),
    st.integers(-(10**9), 10**9),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
_TYPE = {str: "string", int: "integer", bool: "boolean", list: "array", dict: "object"}


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(sorted(TOOL_PARSERS)),
    st.text(max_size=30),
    st.lists(
        st.tuples(
            st.sampled_from(["f", "g_1"]),
            st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _value, max_size=4),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_property_format_then_parse_round_trips(parser, content, calls):
    tools = []
    for name in {n for n, _ in calls}:
        props = {}
        for n, args in calls:
            if n == name:
                props.update({k: {"type": _TYPE[type(v)]} for k, v in args.items()})
        tools.append(
            {
                "type": "function",
                "function": {"name": name, "parameters": {"type": "object", "properties": props}},
            }
        )
    # a key used with two different types across calls cannot be typed by one schema
    for name, args in calls:
        schema = next(t for t in tools if t["function"]["name"] == name)["function"]["parameters"]
        if any(schema["properties"][k]["type"] != _TYPE[type(v)] for k, v in args.items()):
            return
    for marker in ("<tool_call>", "<think>", "</think>", "<|im_end|>", "<|endoftext|>"):
        content = content.replace(marker, "")
    text = (content + "\n" if content.strip() else "") + format_tool_calls(calls, parser)
    parsed = parse_assistant(text, tools, tool_parser=parser)
    assert not parsed.ill_formed, parsed.errors
    assert calls_of(parsed) == calls
    assert parsed.message["content"] == content.strip()
