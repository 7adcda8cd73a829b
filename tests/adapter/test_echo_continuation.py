"""The adapter still sees an ordinary continuation when the CLI echoes our reply with edited tool
arguments (Claude Code drops a leading ``cd <cwd> &&`` from Bash commands), but not when the echo
changes the text or the calls themselves. The end-to-end check is in test_run_e2e.py."""

from __future__ import annotations

from coding_agent_rl.adapter.canonical import message_key, tools_key
from coding_agent_rl.adapter.sessions import RecordedTurn
from coding_agent_rl.adapter.turns import find_parent
from coding_agent_rl.trajectory.turn import Turn


def bash(command: str, content: str = "") -> dict:
    call = {"type": "function", "function": {"name": "Bash", "arguments": {"command": command}}}
    return {"role": "assistant", "content": content, "tool_calls": [call]}


def test_edited_tool_arguments_in_the_echo_still_continue_the_turn():
    user = {"role": "user", "content": "fix the bug"}
    sampled = bash("cd /testbed && ls")
    turn = Turn("s", 0, [user], [], [1], [2], [0.0], "stop", sampled)
    rec = RecordedTurn(turn, (message_key(user), message_key(sampled)), tools_key([]))
    result = {"role": "tool", "content": "a.py"}

    def parent(echo: dict) -> int | None:
        messages = [user, echo, result]
        keys = tuple(message_key(m) for m in messages)
        found = find_parent([rec], keys, tools_key([]), messages)
        return found.turn.index if found else None

    assert parent(sampled) == 0
    assert parent(bash("ls")) == 0  # what Claude Code echoes
    assert parent(bash("ls", content="edited text")) is None
    assert parent({"role": "assistant", "content": "", "tool_calls": []}) is None
    other = bash("ls")
    other["tool_calls"][0]["function"]["name"] = "Read"
    assert parent(other) is None
    # An edited earlier message is not a continuation, whatever the echo.
    messages = [{"role": "user", "content": "summary"}, bash("ls"), result]
    keys = tuple(message_key(m) for m in messages)
    assert find_parent([rec], keys, tools_key([]), messages) is None
