"""A small user environment for the native-loop tests (and a ``rollout_interaction_env_path``
module for the slime call path): an adding machine with tools ``add`` and ``answer``.

It is written the way a slime user writes one: ``BaseInteractionEnv`` subclass, tool calls parsed
from the text, ``build_env(sample=..., args=...)``. Knobs in ``sample.metadata["calc"]`` make it
misbehave on purpose: ``fail_turns`` (turn indexes whose first step attempt raises), ``fail``
(``"always"`` | ``"fatal"``), ``reset_on_fail``, ``pad`` (characters added to each observation),
``images`` (an observation with ``multi_modal_data``: a path that does not exist), ``png`` (a
real PNG per observation), ``async`` (async methods).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from coding_agent_rl.env.base import BaseInteractionEnv, EnvError, FatalEnvError
from coding_agent_rl.model.parsers import parse_assistant

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "answer",
            "description": "Give the final answer.",
            "parameters": {"type": "object", "properties": {"value": {"type": "integer"}}},
        },
    },
]


class CalcEnv(BaseInteractionEnv):
    tools = TOOLS

    def __init__(self, **knobs: Any):
        self.knobs = knobs
        self.turn = 0
        self.attempts: dict[int, int] = {}
        self.resets = 0
        self.closed = False
        self.answer: int | None = None
        self.steps: list[str] = []

    def reset(self):
        self.resets += 1
        return {"obs_str": "ready"}, {"resets": self.resets}

    def _fail(self) -> None:
        attempt = self.attempts.get(self.turn, 0)
        self.attempts[self.turn] = attempt + 1
        mode = self.knobs.get("fail")
        if mode == "always":
            raise EnvError("the calculator is down", reset=bool(self.knobs.get("reset_on_fail")))
        if mode == "fatal":
            raise FatalEnvError("the calculator burned")
        if self.turn in self.knobs.get("fail_turns", ()) and attempt == 0:
            raise EnvError("transient glitch", reset=bool(self.knobs.get("reset_on_fail")))

    def step(self, response_text: str):
        self._fail()
        self.steps.append(response_text)
        self.turn += 1
        parsed = parse_assistant(response_text, TOOLS, tool_parser="qwen25")
        calls = parsed.message.get("tool_calls") or []
        if not calls:
            return {"obs_str": "call a tool"}, bool(self.knobs.get("done_on_text", True)), {}
        out = []
        for call in calls:
            name, args = call["function"]["name"], call["function"]["arguments"]
            if name == "answer":
                self.answer = args.get("value")
                return {"obs_str": "ok"}, True, {"answer": self.answer}
            out.append(f"{args.get('a')} + {args.get('b')} = {args.get('a', 0) + args.get('b', 0)}")
        obs: dict[str, Any] = {"obs_str": "\n".join(out) + "x" * int(self.knobs.get("pad", 0))}
        if self.knobs.get("images"):
            obs["multi_modal_data"] = {"image": ["/tmp/plot.png"]}
        if self.knobs.get("png"):  # a real rendered plot (PNG bytes), one per step
            from support.vision_helpers import png

            obs["multi_modal_data"] = {"image": [png(28 * self.turn, 28)]}
        return obs, False, {"tool": "add"}

    def format_observation(self, observation):
        if self.knobs.get("tool_messages"):
            return [{"role": "tool", "name": "add", "content": observation["obs_str"]}]
        return super().format_observation(observation)

    def close(self):
        self.closed = True


class AsyncCalcEnv(CalcEnv):
    async def reset(self):
        await asyncio.sleep(0)
        return CalcEnv.reset(self)

    async def step(self, response_text: str):
        await asyncio.sleep(0)
        return CalcEnv.step(self, response_text)

    async def close(self):
        await asyncio.sleep(0)
        CalcEnv.close(self)


BUILT: list[CalcEnv] = []  # what build_env made, for the tests to inspect


def build_env(sample: Any = None, args: Any = None) -> CalcEnv:
    knobs = dict((sample.metadata or {}).get("calc") or {})
    env = AsyncCalcEnv(**knobs) if knobs.get("async") else CalcEnv(**knobs)
    BUILT.append(env)
    return env


def call_text(name: str, **arguments: Any) -> str:
    """A qwen25 tool call as the model writes it."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'
