"""LLM-as-judge feedback as an environment: a wrapper around any env, no change to the loop.

``critique`` appends the judge's critique to the observation; ``score`` blends the judge's mean
score with the tests' reward (an unsolved task earns at most ``weight``). Judges:
:class:`OpenAIJudge`, :class:`SGLangJudge`. Defences against a policy writing to the judge:
docs/modules/env.md.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from typing import Any, Protocol

import aiohttp

from coding_agent_rl.env.base import BaseInteractionEnv, EnvError, EnvOutcome, call, split_step
from coding_agent_rl.env.turns import preview

MODES = ("critique", "score")
SCORE_LINE = re.compile(r"^\s*SCORE:\s*([0-9]*\.?[0-9]+)\s*$", re.M)
JUDGE_SYSTEM = (
    "You review one step of a coding agent. Judge whether the action is a sensible step "
    "towards solving the task, given its result. Write a short critique, then a last line "
    "exactly 'SCORE: x' with x between 0 (harmful or useless) and 1 (clearly right)."
)


class Judge(Protocol):
    async def complete(self, messages: list[dict[str, Any]]) -> str: ...


class OpenAIJudge:
    """A judge behind an OpenAI-compatible chat completions endpoint (``base_url`` without
    ``/v1``)."""

    def __init__(
        self, base_url: str, *, model: str = "judge", api_key: str = "judge", max_tokens: int = 512
    ):
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.model, self.api_key, self.max_tokens = model, api_key, max_tokens

    async def complete(self, messages: list[dict[str, Any]]) -> str:
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        headers = {"Authorization": f"Bearer {self.api_key}"}
        timeout = aiohttp.ClientTimeout(total=600)
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.post(self.url, json=body, headers=headers) as resp,
        ):
            if resp.status != 200:
                raise EnvError(f"judge answered HTTP {resp.status}: {(await resp.text())[:300]}")
            data = await resp.json(content_type=None)
        try:
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError) as e:
            raise EnvError(f"judge reply has no message: {str(data)[:300]}") from e


class SGLangJudge:
    """A judge served by SGLang (or a CPU policy server): its chat template renders the
    messages, ``/generate`` answers."""

    def __init__(self, client: Any, encoder: Any, *, max_new_tokens: int = 512):
        self.client, self.encoder, self.max_new_tokens = client, encoder, max_new_tokens

    async def complete(self, messages: list[dict[str, Any]]) -> str:
        ids = self.encoder.prompt(messages, None).ids
        params = {
            "temperature": 0.0,
            "max_new_tokens": self.max_new_tokens,
            "stop_token_ids": self.encoder.stop_token_ids,
        }
        gen = await self.client.generate(ids, params, routing_key="judge")
        return self.encoder.decode(gen.output_ids)


@dataclasses.dataclass
class JudgeConfig:
    mode: str = "critique"
    weight: float = 0.2  # score mode: the judge's share of the reward
    excerpt_chars: int = 4000  # of the action and of the result, sent to the judge

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"judge mode must be one of {MODES}, got {self.mode!r}")
        if not 0.0 <= self.weight < 1.0:
            raise ValueError(f"judge weight must be in [0, 1), got {self.weight}")


def defuse(text: str) -> str:
    """Text the policy controls, made unable to pass for the judge's score line."""
    return re.sub(r"SCORE\s*:", "SCORE (quoted):", text, flags=re.I)


def parse_score(reply: str) -> float | None:
    """The last ``SCORE: x`` line of the judge's reply, clamped to [0, 1]."""
    found = SCORE_LINE.findall(reply)
    return min(1.0, max(0.0, float(found[-1]))) if found else None


def combine(test_reward: float, judge_score: float, weight: float) -> float:
    """The documented rule: ``(1 - weight) * test_reward + weight * judge_score``."""
    return (1.0 - weight) * test_reward + weight * judge_score


class JudgeEnv(BaseInteractionEnv):
    """``inner`` with a judge's critique (or score) after each step; ``task`` is what the judge
    is told the agent must do."""

    def __init__(self, inner: Any, judge: Judge, config: JudgeConfig | None = None, *, task: str):
        self.inner, self.judge, self.task = inner, judge, task
        self.config = config or JudgeConfig()
        self.tools = getattr(inner, "tools", None)
        self.scores: list[float] = []
        self.critiques: list[str] = []
        self._pending: tuple[str, tuple[Any, bool, dict[str, Any]]] | None = None

    async def reset(self) -> Any:
        self._pending = None
        return await call(self.inner.reset)

    def _messages(self, action: str, observation: Any) -> list[dict[str, Any]]:
        n = self.config.excerpt_chars
        result = observation.get("obs_str", "") if isinstance(observation, dict) else observation
        user = (
            f"Task:\n{preview(self.task, n)}\n\n"
            f"Agent action:\n<action>\n{defuse(preview(action, n))}\n</action>\n\n"
            f"Result:\n<result>\n{defuse(preview(str(result), n))}\n</result>"
        )
        return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]

    async def step(self, response_text: str) -> tuple[Any, bool, dict[str, Any]]:
        if self._pending is not None and self._pending[0] == response_text:
            observation, done, info = self._pending[1]  # the judge failed last time: ask again
        else:
            observation, done, info = split_step(await call(self.inner.step, response_text))
            self._pending = (response_text, (observation, done, info))
        try:
            reply = await self.judge.complete(self._messages(response_text, observation))
        except EnvError:
            raise
        except Exception as e:
            raise EnvError(f"judge: {type(e).__name__}: {e}") from e
        score = parse_score(reply)
        if score is None:
            raise EnvError(f"judge reply has no 'SCORE: x' line: {reply[-200:]!r}")
        self._pending = None
        self.scores.append(score)
        info = {**info, "judge_score": score}
        if self.config.mode == "critique":
            critique = SCORE_LINE.sub("", reply).strip()
            self.critiques.append(critique)
            if isinstance(observation, dict):
                observation = {**observation, "judge_critique": critique}
        return observation, done, info

    def format_observation(self, observation: Any) -> Any:
        message = self.inner.format_observation(observation)
        critique = observation.get("judge_critique") if isinstance(observation, dict) else None
        if not critique:
            return message
        messages = message if isinstance(message, list) else [message]
        return [*messages, {"role": "user", "content": f"Reviewer feedback: {critique}"}]

    async def evaluate(self) -> EnvOutcome:
        inner = self.inner
        outcome = await call(inner.evaluate) if hasattr(inner, "evaluate") else EnvOutcome(None)
        if self.config.mode != "score" or outcome.failure_kind == "infra":
            return outcome
        test = outcome.reward or 0.0
        judge = statistics.fmean(self.scores) if self.scores else 0.0
        record = {
            **outcome.record,
            "test_reward": test,
            "judge_score": round(judge, 6),
            "judge_scores": self.scores,
            "judge_weight": self.config.weight,
        }
        reward = combine(test, judge, self.config.weight)
        return EnvOutcome(reward, outcome.failure_kind, outcome.reason, record)

    async def close(self) -> None:
        await call(self.inner.close)

    def __getattr__(self, name: str) -> Any:  # the inner env's extras (timings, transcript, ...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
