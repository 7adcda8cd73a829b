"""Message identity and chain construction."""

from __future__ import annotations

import pytest
from support.traj_sim import SYSTEM, USER, turn

from coding_agent_rl.trajectory import build_samples
from coding_agent_rl.trajectory.tree import MessageTree, build_chains, message_key
from coding_agent_rl.types import Sample


def call(name, arguments, **extra):
    return {"type": "function", "function": {"name": name, "arguments": arguments}, **extra}


def test_message_key_ignores_wire_details():
    recorded = {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "hmm",
        "tool_calls": [call("Bash", {"command": "ls", "timeout": 5})],
    }
    replayed = {
        "role": "assistant",
        "content": "Let me look.\n",
        "tool_calls": [call("Bash", '{"timeout": 5, "command": "ls"}', id="toolu_01")],
    }
    assert message_key(recorded) == message_key(replayed)
    other = {**replayed, "tool_calls": [call("Bash", {"command": "ls -a", "timeout": 5})]}
    assert message_key(recorded) != message_key(other)
    tool = {"role": "tool", "content": "out", "tool_call_id": "toolu_01", "name": "Bash"}
    assert message_key(tool) == message_key({"role": "tool", "content": "out"})
    blocks = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert message_key(blocks) == message_key({"role": "user", "content": "hi"})


def test_tree_finds_the_deepest_recorded_turn_on_a_path():
    t0 = turn(0, [SYSTEM, USER], [1], [2], content="a0")
    t1 = turn(1, [SYSTEM, USER, t0.assistant, USER], [1, 2, 3], [4], content="a1")
    tree = MessageTree()
    tree.insert(t0)
    tree.insert(t1)
    assert tree.deepest_turns([SYSTEM, USER, t0.assistant, USER, t1.assistant, USER]) == [1]
    assert tree.deepest_turns([SYSTEM, USER, t0.assistant, {"role": "user", "content": "x"}]) == [0]
    assert tree.deepest_turns([SYSTEM, {"role": "user", "content": "x"}]) == []


def test_chains_share_prefixes_and_parent_wins_over_messages():
    t0 = turn(0, [SYSTEM, USER], [1], [2], content="a0")
    history = [SYSTEM, USER, t0.assistant, USER]
    t1 = turn(1, history, [1, 2, 3], [4], parent=0, content="a1")
    t2 = turn(2, history, [1, 2, 3], [5], parent=0, content="a2")  # a second answer (fork)
    t3 = turn(3, [SYSTEM, {"role": "user", "content": "new"}], [1, 2, 3, 5, 6], [7], parent=2)
    chains = build_chains([t3, t1, t0, t2])
    assert [c.indices() for c in chains] == [[0, 1], [0, 2, 3]]
    assert chains[1].links[0] is None and chains[1].links[2].kind.value == "extend"


def test_bad_input_is_refused():
    t0 = turn(0, [SYSTEM, USER], [1], [2])
    with pytest.raises(ValueError, match="unique"):
        build_chains([t0, turn(0, [SYSTEM, USER], [1], [3])])
    other = turn(1, [SYSTEM, USER], [1], [3])
    other.session_id = "another"
    with pytest.raises(ValueError, match="ONE session"):
        build_samples([t0, other], Sample(index=0), reward=1.0)
    t0.output_logprobs = []
    with pytest.raises(ValueError, match="logprobs"):
        build_samples([t0], Sample(index=0), reward=1.0)
