"""A synthetic session recorder for trajectory tests: a tiny deterministic renderer + agent.

Messages are rendered to ints the way a Qwen-style chat template lays them out:
``START role body END NL`` per message, ``START ASSISTANT`` as the generation prompt. A sampled
output is the assistant body followed by the stop token ``END`` (none after a ``length`` finish).
Words are ``"w<k>"`` and encode to token ``100 + k``.

The recorder mimics the adapter: a conversation that only appended messages since its last turn
is rendered incrementally (``prompt + output + fix-up + new messages``, ``parent`` set); anything
else is rendered in full (``parent`` None), optionally dropping historical reasoning the way
Qwen3's template does (so the tokens no longer extend what was sampled).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coding_agent_rl.trajectory.turn import Turn

START, END, NL, ALT_END = 1, 2, 3, 4
ROLE = {"system": 10, "user": 11, "assistant": 12, "tool": 13}
THINK, END_THINK, CALL = 21, 22, 23
TOOL_TOKEN = {"Bash": 30, "Task": 31, "Agent": 32, "invoke_agent": 33}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in TOOL_TOKEN]


SYSTEM = {"role": "system", "content": "sys"}
USER = {"role": "user", "content": "do it"}


def turn(index, messages, prompt, output, *, parent=None, content="a", finish="stop") -> Turn:
    """A hand-made turn (logprobs made up, distinct per position)."""
    return Turn(
        session_id="s",
        index=index,
        messages=messages,
        tools=[],
        prompt_ids=prompt,
        output_ids=output,
        output_logprobs=[-0.5 - 0.01 * i for i in range(len(output))],
        finish_reason=finish,
        assistant={"role": "assistant", "content": content},
        parent=parent,
    )


def enc(text: str) -> list[int]:
    return [100 + int(w[1:]) for w in text.split()]


def body(m: dict[str, Any], keep_think: bool = True) -> list[int]:
    toks: list[int] = []
    if keep_think and m.get("reasoning_content"):
        toks += [THINK, *enc(m["reasoning_content"]), END_THINK]
    toks += enc(m.get("content") or "")
    for call in m.get("tool_calls") or []:
        fn = call["function"]
        arg = fn["arguments"].get("prompt") or fn["arguments"].get("command") or ""
        toks += [CALL, TOOL_TOKEN[fn["name"]], *enc(arg)]
    return toks


def render(messages: list[dict[str, Any]], drop_think: bool) -> list[int]:
    out: list[int] = []
    for m in messages:
        keep = not (drop_think and m["role"] == "assistant")
        out += [START, ROLE[m["role"]], *body(m, keep), END, NL]
    return [*out, START, ROLE["assistant"]]


@dataclasses.dataclass
class Conv:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    kind: str  # ground truth: "main" | "sub" | "aux"
    last: Turn | None = None
    pending: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    appended_only: bool = True

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.pending.append(message)


class Recorder:
    def __init__(self, drop_think: bool = True, sid: str = "sid-1"):
        self.drop_think = drop_think
        self.sid = sid
        self.turns: list[Turn] = []
        self.kind: dict[int, str] = {}  # turn index -> ground-truth kind
        self.realigned: set[int] = set()  # turns whose stop token the next prompt re-rendered
        self._word = 100  # w1..w100 are reserved for fixed texts

    def words(self, n: int) -> str:
        """Fresh words, never seen before in this session (so unrelated texts never collide)."""
        self._word += n
        return " ".join(f"w{k}" for k in range(self._word - n + 1, self._word + 1))

    def call(
        self,
        conv: Conv,
        *,
        tools: list[tuple[str, str]] = (),
        think: bool = False,
        n_words: int = 3,
        finish: str = "stop",
        commit: bool = True,
        realign_stop: bool = False,
        rerender: bool = False,
    ) -> Turn:
        """One model call on ``conv``.

        ``commit=False``: recorded, but the client discards the answer (it will retry).
        ``realign_stop``: the adapter re-rendered the previous stop token differently.
        ``rerender``: the prompt is rendered in full although ``parent`` is set.
        """
        last = conv.last
        extends = last is not None and conv.appended_only
        if extends and not rerender:
            assert last is not None
            stream = list(last.prompt_ids) + list(last.output_ids)
            if realign_stop and last.output_ids[-1:] == [END]:
                stream[-1] = ALT_END
                self.realigned.add(last.index)
            fix = [NL] if last.output_ids[-1:] == [END] else [END, NL]
            prompt = stream + fix + render(conv.pending, self.drop_think)
        else:
            prompt = render(conv.messages, self.drop_think)
        assistant: dict[str, Any] = {"role": "assistant", "content": self.words(n_words)}
        if think:
            assistant["reasoning_content"] = self.words(2)
        if tools:
            assistant["tool_calls"] = [
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": {
                            "prompt"
                            if name in ("Task", "Agent", "invoke_agent")
                            else "command": arg
                        },
                    },
                }
                for name, arg in tools
            ]
        output = body(assistant) + ([END] if finish == "stop" else [])
        turn = Turn(
            session_id=self.sid,
            index=len(self.turns),
            messages=[dict(m) for m in conv.messages],
            tools=conv.tools,
            prompt_ids=prompt,
            output_ids=output,
            output_logprobs=[-0.01 * (len(self.turns) + 1) - 0.001 * i for i in range(len(output))],
            finish_reason=finish,
            assistant=assistant,
            parent=last.index if extends and last is not None else None,
        )
        self.turns.append(turn)
        self.kind[turn.index] = conv.kind if commit else "aux"
        if commit:
            conv.add(assistant)
            conv.pending = []
            conv.last = turn
            conv.appended_only = True
        return turn

    # -- conversations -------------------------------------------------------------------------

    def main(self) -> Conv:
        return Conv(
            [{"role": "system", "content": "w1 w2"}, {"role": "user", "content": self.words(4)}],
            TOOLS,
            "main",
        )

    def tool_result(self, conv: Conv, text: str | None = None) -> None:
        conv.add({"role": "tool", "content": text if text is not None else self.words(3)})

    def subagent_conv(self, prompt: str) -> Conv:
        return Conv(
            [{"role": "system", "content": "w3 w4"}, {"role": "user", "content": prompt}],
            TOOLS[:1],
            "sub",
        )

    def subagent(self, prompt: str, steps: int) -> str:
        sub = self.subagent_conv(prompt)
        for _ in range(steps):
            self.call(sub, tools=[("Bash", self.words(2))])
            self.tool_result(sub)
        return self.call(sub).assistant["content"]

    def side_request(self) -> None:
        conv = Conv(
            [{"role": "system", "content": "w5 w6"}, {"role": "user", "content": self.words(2)}],
            [],
            "aux",
        )
        self.call(conv, n_words=1)

    def compact(self, conv: Conv) -> Conv:
        conv.add({"role": "user", "content": "w7 w8"})  # "summarize the conversation"
        summary = self.call(conv, n_words=5).assistant["content"]
        return Conv(
            [{"role": "system", "content": "w1 w2"}, {"role": "user", "content": summary}],
            TOOLS,
            "main",
        )

    def edit_history(self, conv: Conv) -> bool:
        """Clear the oldest tool result (micro-compaction); False when there is none."""
        for i, m in enumerate(conv.messages):
            if m["role"] == "tool" and m["content"] != "w9":
                conv.messages[i] = {"role": "tool", "content": "w9"}
                conv.appended_only = False
                return True
        return False
