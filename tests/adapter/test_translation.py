"""Wire request -> canonical messages/tools, and the turn-matching rules (no HTTP needed)."""

from __future__ import annotations

import pytest

from coding_agent_rl.adapter.anthropic import AnthropicMessages
from coding_agent_rl.adapter.canonical import message_key
from coding_agent_rl.adapter.errors import BadRequest
from coding_agent_rl.adapter.openai_chat import OpenAIChat
from coding_agent_rl.adapter.openai_responses import OpenAIResponses
from coding_agent_rl.adapter.sessions import RecordedTurn, SessionConfig
from coding_agent_rl.adapter.turns import find_parent, sampling_params
from coding_agent_rl.trajectory.turn import Turn


def test_anthropic_request_to_canonical():
    body = {
        "model": "claude-x",
        "max_tokens": 100,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.4a9;"},
            {"type": "text", "text": "You are Claude.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>a</system-reminder>"},
                    {"type": "text", "text": "fix it"},
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "env: linux"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig"},
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}},
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "Bash",
                        "input": {"command": "ls"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [
                            {"type": "text", "text": "line1"},
                            {"type": "image", "source": {}},
                        ],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "boom",
                        "is_error": True,
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": "keep going"},
                ],
            },
            {"role": "system", "content": "late note"},
        ],
        "tools": [
            {"name": "Read", "description": "r", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        ],
        "unknown_field": {"x": 1},
        "thinking": {"type": "adaptive"},
    }
    req = AnthropicMessages().parse(body)
    assert req.messages == [
        {"role": "system", "content": "You are Claude."},
        {
            "role": "user",
            "content": "<system-reminder>a</system-reminder>\nfix it\n"
            "<system-reminder>\nenv: linux\n</system-reminder>",
        },
        {
            "role": "assistant",
            "content": "Looking.",
            "reasoning_content": "plan",
            "tool_calls": [
                {"type": "function", "function": {"name": "Read", "arguments": {"path": "a"}}},
                {"type": "function", "function": {"name": "Bash", "arguments": {"command": "ls"}}},
            ],
        },
        {
            "role": "tool",
            "name": "Read",
            # The image block is kept; the turn engine decodes, bounds and renders it
            "content": [{"type": "text", "text": "line1"}, {"type": "image", "source": {}}],
        },
        {"role": "tool", "name": "Bash", "content": "Error: boom"},
        {"role": "user", "content": "keep going\n<system-reminder>\nlate note\n</system-reminder>"},
    ]
    assert req.tools == [
        {
            "type": "function",
            "function": {"name": "Read", "description": "r", "parameters": {"type": "object"}},
        }
    ]
    assert req.sampling == {"max_new_tokens": 100}
    assert req.model == "claude-x" and req.stream is False


def test_anthropic_rejects_bad_requests():
    with pytest.raises(BadRequest):
        AnthropicMessages().parse({"model": "m", "messages": []})
    with pytest.raises(BadRequest):
        AnthropicMessages().parse({"messages": [{"role": "robot", "content": "x"}]})


def test_chat_request_to_canonical():
    body = {
        "model": "m",
        "messages": [
            {"role": "developer", "content": "dev rules"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "hmm",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "not json"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "err"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {}}}],
        "max_completion_tokens": 50,
        "stop": "END",
        "top_k": 5,
    }
    req = OpenAIChat().parse(body)
    assert req.messages == [
        {"role": "system", "content": "dev rules"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:"}},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "hmm",
            "tool_calls": [
                {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}},
                {"type": "function", "function": {"name": "bash", "arguments": "not json"}},
            ],
        },
        {"role": "tool", "name": "bash", "content": "a.txt"},
        {"role": "tool", "name": "bash", "content": "err"},
    ]
    assert req.sampling == {"max_new_tokens": 50, "stop": ["END"], "top_k": 5}


def test_responses_request_to_canonical():
    wire = OpenAIResponses()
    body = {
        "model": "m",
        "instructions": "base",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "perms"}],
            },
            {"role": "user", "content": "do it"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "s"}],
                "content": [{"type": "reasoning_text", "text": "full thought"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "On it."}],
            },
            {
                "type": "function_call",
                "call_id": "k1",
                "name": "exec_command",
                "arguments": '{"cmd": "ls"}',
            },
            {"type": "custom_tool_call", "call_id": "k2", "name": "apply_patch", "input": "PATCH"},
            {"type": "function_call_output", "call_id": "k1", "output": "a.txt"},
            {"type": "custom_tool_call_output", "call_id": "k2", "output": "ok"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only summary"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Done."}],
            },
            {"type": "web_search_call", "id": "ws"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thx"}]},
        ],
        "tools": [{"type": "local_shell"}],
        "max_output_tokens": 77,
    }
    req = wire.parse(body)
    assert req.messages == [
        {"role": "system", "content": "base"},
        {"role": "system", "content": "perms"},
        {"role": "user", "content": "do it"},
        {
            "role": "assistant",
            "content": "On it.",
            "reasoning_content": "full thought",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "exec_command", "arguments": {"cmd": "ls"}},
                },
                {
                    "type": "function",
                    "function": {"name": "apply_patch", "arguments": {"input": "PATCH"}},
                },
            ],
        },
        {"role": "tool", "name": "exec_command", "content": "a.txt"},
        {"role": "tool", "name": "apply_patch", "content": "ok"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "only summary"},
        {"role": "user", "content": "thx"},
    ]
    assert req.tools == [] and req.sampling == {"max_new_tokens": 77}


def test_responses_consecutive_assistant_turns_stay_separate():
    body = {
        "input": [
            {"role": "user", "content": "a"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "1"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "2"}],
            },
        ]
    }
    messages = OpenAIResponses().parse(body).messages
    assert [m.get("content") for m in messages] == ["a", "1", "2"]


def test_message_key_tolerates_what_clients_change():
    base = {
        "role": "assistant",
        "content": "Hi there.",
        "reasoning_content": "r",
        "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": 2}}}
        ],
    }
    trimmed = {
        "role": "assistant",
        "content": "  Hi there.\n",
        "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"b": 2, "a": 1}}}
        ],
    }
    assert message_key(base) == message_key(trimmed)
    changed = {
        **trimmed,
        "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": 3}}}
        ],
    }
    assert message_key(base) != message_key(changed)
    assert message_key({"role": "user", "content": "x"}) != message_key(
        {"role": "assistant", "content": "x"}
    )


def _recorded(index: int, messages: list[dict], assistant: dict, tools=()) -> RecordedTurn:
    from coding_agent_rl.adapter.canonical import tools_key

    turn = Turn(
        session_id="s",
        index=index,
        messages=messages,
        tools=list(tools),
        prompt_ids=[1],
        output_ids=[2],
        output_logprobs=[0.0],
        finish_reason="stop",
        assistant=assistant,
    )
    keys = tuple(message_key(m) for m in [*messages, assistant])
    return RecordedTurn(turn=turn, prefix_keys=keys, tools_key=tools_key(list(tools)))


def test_find_parent_picks_the_most_recent_extended_turn():
    from coding_agent_rl.adapter.canonical import tools_key

    u1, a1 = {"role": "user", "content": "task"}, {"role": "assistant", "content": "one"}
    t1 = {"role": "tool", "content": "r1"}
    a2 = {"role": "assistant", "content": "two"}
    sub_u, sub_a = {"role": "user", "content": "subtask"}, {"role": "assistant", "content": "s"}
    recorded = [
        _recorded(0, [u1], a1),
        _recorded(1, [u1, a1, t1], a2),
        _recorded(2, [sub_u], sub_a),
    ]

    def parent(messages, tools=()):
        keys = tuple(message_key(m) for m in messages)
        found = find_parent(recorded, keys, tools_key(list(tools)), messages)
        return found.turn.index if found else None

    assert parent([u1, a1, t1, a2, {"role": "tool", "content": "r2"}]) == 1
    assert parent([sub_u, sub_a, {"role": "user", "content": "more"}]) == 2  # interleaved subagent
    assert parent([u1, a1, {"role": "tool", "content": "r1"}]) == 0  # a retry of turn 1
    assert parent([u1, a1, t1, a2]) is None  # nothing new after the assistant turn
    assert parent([u1, {"role": "assistant", "content": "edited"}, t1]) is None
    assert parent([u1, a1, t1, a2, {"role": "assistant", "content": "x"}]) is None
    assert parent([u1, a1, t1], tools=[{"type": "function", "function": {"name": "g"}}]) is None
    assert parent([{"role": "user", "content": "summary of the work"}]) is None  # compaction


def test_sampling_params_precedence_and_budget():
    config = SessionConfig(
        sampling_defaults={"temperature": 0.7, "top_p": 0.8},
        sampling_fixed={"temperature": 1.0, "max_new_tokens": 500},
    )
    params, room = sampling_params(
        {"max_new_tokens": 4096, "top_k": 20},
        config,
        {"max_new_tokens": 64000, "top_p": 0.95},
        900,
        1000,
        [7, 9],
    )
    assert room
    assert params["max_new_tokens"] == 100  # min(request, fixed cap, context budget)
    assert (params["temperature"], params["top_p"], params["top_k"]) == (1.0, 0.95, 20)
    assert params["stop_token_ids"] == [7, 9]
    params, room = sampling_params({}, SessionConfig(), {"max_new_tokens": 10}, 1000, 1000, [])
    assert not room and params["max_new_tokens"] == 0
