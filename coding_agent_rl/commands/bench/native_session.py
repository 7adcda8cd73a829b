"""The synthetic native session ``bench native`` runs: an in-process engine, an in-memory
environment, and the session they replay (prompt, then per turn an assistant tool call, its
output ids as the template renders them, and a tool result)."""

from __future__ import annotations

import random
from typing import Any

from coding_agent_rl.commands.bench.synthetic_session import sentence, source_file, system_prompt


class InstantEngine:
    """An in-process engine: hands out pre-rendered outputs (generation cost: none)."""

    def __init__(self, outputs: list[list[int]]):
        from coding_agent_rl.model.sglang import Generation

        self._make = Generation
        self.outputs = outputs
        self.turn = 0

    async def generate(self, input_ids, sampling_params, *, routing_key):
        ids = self.outputs[self.turn]
        self.turn += 1
        return self._make(list(ids), [-0.1] * len(ids), "stop", weight_version="bench")


class ReplayedEnv:
    """An in-memory environment returning each turn's pre-built tool result."""

    def __init__(self, results: list[list[dict[str, Any]]]):
        self.results = results
        self.turn = 0

    def reset(self):
        return {"obs_str": ""}, {}

    def step(self, response_text):
        results = self.results[self.turn]
        self.turn += 1
        return {"obs_str": "", "tool_results": results}, self.turn >= len(self.results), {}

    def format_observation(self, observation):
        return observation["tool_results"]

    def close(self):
        return None


def build_session(encoder: Any, context: int, system_tokens: int, seed: int) -> dict[str, Any]:
    """The prompt, and per turn the assistant message, its output ids and the tool results,
    until the conversation reaches ``context`` tokens."""
    from coding_agent_rl.env.tools import TOOLS

    rng = random.Random(seed)
    tok = encoder.tokenizer

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    prompt = [
        {"role": "system", "content": system_prompt(rng, system_tokens, count)},
        {"role": "user", "content": "Fix the failing test. " + sentence(rng)},
    ]
    size = len(encoder.prompt(prompt, TOOLS).ids)
    turns = []
    while True:  # until the stream (the last turn's result is never appended) reaches context
        command = f"python -m pytest -q tests/test_{rng.randint(0, 99)}.py"
        message = {
            "role": "assistant",
            "content": sentence(rng),
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "bash", "arguments": {"command": command}},
                }
            ],
        }
        results = [
            {"role": "tool", "name": "bash", "content": source_file(rng, rng.randint(5, 60))}
        ]
        output = encoder.renderer.canonical_output(message)
        turns.append((message, output, results))
        size += len(output)
        if size >= context:
            break
        size += count(results[0]["content"]) + 12  # with the tool-response framing
    return {"prompt": prompt, "tools": TOOLS, "turns": turns}
