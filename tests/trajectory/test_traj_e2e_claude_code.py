"""End to end with the real Claude Code 2.1.332 binary: adapter -> recorded turns -> samples.

1. A run that dispatches a subagent and is forced to auto-compact comes back as sibling samples
   labelled ``subagent``, ``wipe`` and ``final`` that share one rollout_id and train every sampled
   token exactly once.
2. A long linear run under a template that drops historical ``<think>`` is ONE sample (a
   re-rendering adapter would fork at every turn: slime's reported 8 -> 64 blow-up).

How compaction is forced offline (read from the binary): ``autoCompactWindow`` accepts at least
100,000 tokens (smaller values are raised to that); the effective window subtracts 20,000 for
output, and auto-compaction fires 13,000 below that, i.e. once the reported prompt size passes
~67,000 tokens. Four ``seq 1 3000`` outputs (~14,000 Qwen tokens each: digits are single tokens)
on top of the ~19,000-token first request get there. Claude Code then sends the history plus a
"create a detailed summary" user message, and continues from a NEW history: the summary, the
preserved last tool call and its result.

Facts this version showed: the dispatch tool is ``Agent`` on the wire (the stream-json init event
calls it ``Task``), and subagents run in the background by default: the ``Agent`` call's tool
result is an immediate "Async agent launched" acknowledgement, the subagent's requests follow,
and its answer reaches the main agent later as a ``<task-notification>`` user message.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
from pathlib import Path

import pytest
from support.traj_sim import Recorder

from coding_agent_rl.harness.claude_code import ClaudeCode
from coding_agent_rl.harness.context import HarnessContext
from coding_agent_rl.model.render import Renderer
from coding_agent_rl.trajectory import build_samples
from coding_agent_rl.trajectory.tree import text_of
from coding_agent_rl.types import Sample, Status

RUN_TIMEOUT_S = 150
DISPATCH_TOOL = "Agent"
SUB_PROMPT = "SUBTASK-7: print greeting.txt"
SUMMARY_ASK = "Your task is to create a detailed summary"
SUMMARY = "<summary>SUMMARY-42: the user asked for filler output; four seq runs done.</summary>"
COMPACTED = "This session is being continued from a previous conversation"
# autoCompactWindow's minimum in this version; see the module docstring for the threshold.
COMPACT_SETTINGS = {"autoCompactEnabled": True, "autoCompactWindow": 100_000}


async def run_claude(binary: Path, tmp: Path, url: str, sid: str, prompt: str, *args: str):
    """Run the CLI as the harness configures it, on the host, in ``tmp/work``."""
    work, home, tmpdir = tmp / "work", tmp / "home", tmp / "tmp"
    for d in (work, home, tmpdir):
        d.mkdir(exist_ok=True)
    (work / "greeting.txt").write_text("hello world\n")
    harness = ClaudeCode(extra_args=[], extra_env={})
    # user="root": this test runs as root, so the harness sets IS_SANDBOX=1.
    ctx = HarnessContext(
        adapter_url=url, session_id=sid, model="policy", workdir=str(work), user="root"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmpdir),  # background-agent transcripts land here
        "LANG": "C.UTF-8",
        **harness.env(ctx),
    }
    argv = [str(binary), *harness.argv(ctx, prompt)[1:], *args]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=work,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"claude timed out; stdout tail {out[-3000:]!r} stderr {err[-3000:]!r}")
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"claude exited {proc.returncode}: {err[-3000:]!r} {text[-3000:]}"
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    result = next(e for e in events if e.get("type") == "result")
    assert result.get("is_error") is False, result
    return events


async def recorded_turns(adapter, sid: str):
    assert await adapter.sessions.settled(sid, timeout=10)
    assert adapter.sessions.errors(sid) == []
    return adapter.sessions.turns(sid)


def first_user(turn) -> str:
    return next(text_of(m["content"]) for m in turn.messages if m["role"] == "user")


def assert_trained_exactly_once(samples: list[Sample], turns) -> None:
    """Every sampled token of every turn is trained in exactly one sibling, with its logprob."""
    by_index = {t.index: t for t in turns}
    trained = collections.Counter()
    for s in samples:
        s.check()
        start = len(s.tokens) - s.response_length
        mask_total = 0
        for index, offset, length in s.metadata["trained_turns"]:
            turn = by_index[index]
            assert s.tokens[offset : offset + length] == turn.output_ids[:length]
            assert s.loss_mask[offset - start : offset - start + length] == [1] * length
            got = s.rollout_log_probs[offset - start : offset - start + length]
            assert got == pytest.approx(turn.output_logprobs[:length])
            trained[index] += length
            mask_total += length
        assert sum(s.loss_mask) == mask_total > 0
    assert trained == {t.index: len(t.output_ids) for t in turns}


def spans(sample: Sample) -> list[int]:
    return [index for index, _, _ in sample.metadata["trained_turns"]]


@pytest.mark.agents
async def test_subagent_and_auto_compaction_become_sibling_samples(
    tmp_path, agent_stack, claude_binary
):
    filler = [{"shell": "seq 1 3000"} for _ in range(4)]
    script = {
        "steps": [
            {
                "tool": {
                    "name": DISPATCH_TOOL,
                    "arguments": {
                        "description": "Read the file",
                        "prompt": SUB_PROMPT,
                        "subagent_type": "general-purpose",
                    },
                }
            },
            *filler,
            {"shell": "echo after-compaction"},
            {"say": "MAIN-DONE: all steps ran."},
        ],
        "rules": [
            {"match": SUMMARY_ASK, "say": SUMMARY, "times": 1},
            # The subagent's own prompt; not the JSON arguments of the main agent's Agent call.
            {
                "match_prompt": '(?<!": ")SUBTASK-7',
                "steps": [{"shell": "cat greeting.txt"}, {"say": "SUB-DONE: it says hello world"}],
            },
        ],
        "final": "MAIN-DONE: nothing left.",
    }
    adapter, url = await agent_stack(script)
    sid = "cc-sub-compact"
    adapter.sessions.open(sid, max_turns=40)
    events = await run_claude(
        claude_binary,
        tmp_path,
        url,
        sid,
        "Print greeting.txt with a helper agent, then produce filler output.",
        "--settings",
        json.dumps(COMPACT_SETTINGS),
    )
    boundaries = [e for e in events if e.get("subtype") == "compact_boundary"]
    assert [b["compact_metadata"]["trigger"] for b in boundaries] == ["auto"], boundaries

    turns = await recorded_turns(adapter, sid)
    offered = {t["function"]["name"] for t in turns[0].tools}
    assert DISPATCH_TOOL in offered, sorted(offered)
    main_system = turns[0].messages[0]["content"]
    sub = [
        t for t in turns if SUB_PROMPT in first_user(t) and t.messages[0]["content"] != main_system
    ]
    compaction = [t for t in turns if SUMMARY_ASK in text_of(t.messages[-1]["content"])]
    after = [t for t in turns if first_user(t).startswith(COMPACTED)]
    before = [t for t in turns if t not in sub + compaction + after]
    print(
        f"\nClaude Code sent {len(turns)} requests: {len(before)} main before compaction, "
        f"{len(sub)} subagent, {len(compaction)} compaction, {len(after)} after compaction; "
        f"prompt tokens {[len(t.prompt_ids) for t in turns]}"
    )
    assert len(sub) == 2 and sub[0].parent is None and sub[1].parent == sub[0].index
    assert sub[1].assistant["content"].startswith("SUB-DONE")
    (summary_turn,) = compaction
    assert summary_turn.assistant["content"] == SUMMARY
    assert summary_turn.parent in {t.index for t in before}  # it extends the old history
    assert after and after[0].parent is None and "SUMMARY-42" in first_user(after[0])
    assert before[0].assistant["tool_calls"][0]["function"]["name"] == DISPATCH_TOOL
    # The subagent's answer reached the main agent (a task notification, or a tool result).
    main_turns = before + compaction + after
    assert any("SUB-DONE" in text_of(m["content"]) for t in main_turns for m in t.messages[2:])
    assert after[-1].assistant["content"].startswith("MAIN-DONE")

    base = Sample(index=7, group_index=0, prompt="task")
    samples = build_samples(turns, base, reward=1.0)
    labels = [s.metadata["segment"] for s in samples]
    print("samples:", [(s.metadata["segment"], spans(s), s.response_length) for s in samples])
    assert set(labels) == {"subagent", "wipe", "final"}, labels
    assert labels[-1] == "final" and labels.count("final") == 1 and labels.count("subagent") == 1
    assert {s.rollout_id for s in samples} == {7}
    assert all(s.reward == 1.0 and s.metadata["rollout_reward"] == 1.0 for s in samples)
    assert all(s.status == Status.COMPLETED for s in samples)
    assert_trained_exactly_once(samples, turns)

    (sub_sample,) = (s for s in samples if s.metadata["segment"] == "subagent")
    assert spans(sub_sample) == [t.index for t in sub]
    assert sub_sample.metadata["dispatch_turn"] == before[0].index
    wipes = [s for s in samples if s.metadata["segment"] == "wipe"]
    assert any(summary_turn.index in spans(w) for w in wipes)
    assert all(set(spans(w)) <= {t.index for t in before + compaction} for w in wipes)
    final = samples[-1]
    assert spans(final) == [t.index for t in after]
    assert final.tokens == after[-1].prompt_ids + after[-1].output_ids


def drop_think_renderer(tokenizer) -> Renderer:
    """Our template, changed to drop the ``<think>`` block of every historical assistant turn
    (what Qwen3-family templates do to replayed histories)."""
    source = tokenizer.chat_template
    keep = "{%- if reasoning -%}"
    assert source.count(keep) == 1, "the template's reasoning branch moved; update this test"
    # In a prompt every assistant message is history: only a conversation's last one keeps it.
    return Renderer(
        tokenizer, chat_template=source.replace(keep, "{%- if reasoning and loop.last -%}")
    )


@pytest.mark.agents
async def test_long_linear_run_with_reasoning_is_one_sample(
    tmp_path, agent_stack, claude_binary, tokenizer
):
    n = 13
    steps = [
        {"shell": f"echo step-{i}", "think": f"Step {i}: run the next command."} for i in range(n)
    ]
    steps.append({"say": "All steps ran.", "think": "Every step is done."})
    renderer = drop_think_renderer(tokenizer)
    adapter, url = await agent_stack({"steps": steps}, renderer)
    sid = "cc-linear-think"
    adapter.sessions.open(sid, max_turns=40)
    await run_claude(claude_binary, tmp_path, url, sid, f"Run echo step-0 .. step-{n - 1}.")

    turns = await recorded_turns(adapter, sid)
    assert len(turns) == n + 1
    for i, turn in enumerate(turns):
        assert turn.parent == (i - 1 if i else None)  # rendered on top of the stored tokens
        assert turn.assistant["reasoning_content"] == steps[i]["think"]
    last = turns[-1]
    # Precondition: the template really drops historical reasoning (the client sent it back).
    assert sum(bool(m.get("reasoning_content")) for m in last.messages) == n
    rerendered = renderer.render(last.messages, last.tools)
    assert rerendered != last.prompt_ids and "Step 0:" not in tokenizer.decode(rerendered)

    (sample,) = build_samples(turns, Sample(index=3, prompt="task"), reward=1.0)
    assert sample.metadata["segment"] == "final" and sample.metadata["turns"] == n + 1
    assert sample.tokens == last.prompt_ids + last.output_ids
    assert "Step 0: run the next command." in tokenizer.decode(sample.tokens)
    assert_trained_exactly_once([sample], turns)

    # What a re-rendering adapter would have recorded forks at every turn (the blow-up).
    naive = [
        dataclasses.replace(t, prompt_ids=renderer.render(t.messages, t.tools), parent=None)
        for t in turns
    ]
    assert len(build_samples(naive, Sample(index=3, prompt="task"), reward=1.0)) == n + 1


def test_async_dispatch_is_a_subagent_sim():
    """Claude Code's default background agents, on the synthetic recorder (no binary): the
    dispatch's tool result is an acknowledgement, the main agent goes on, the subagent starts
    after that result and answers in a later user message (a task notification)."""
    rec = Recorder()
    main = rec.main()
    dispatch = rec.call(main, tools=[("Agent", "w900 w901")])
    rec.tool_result(main, "w960 w961")  # "Async agent launched"
    rec.call(main, tools=[("Bash", rec.words(2))])
    rec.tool_result(main)
    answer = rec.subagent("w900 w901", steps=1)
    main.add({"role": "user", "content": answer})
    rec.call(main)
    samples = build_samples(rec.turns, Sample(index=1), reward=1.0)
    assert [s.metadata["segment"] for s in samples] == ["subagent", "final"]
    assert samples[0].metadata["dispatch_turn"] == dispatch.index
    assert_trained_exactly_once(samples, rec.turns)
