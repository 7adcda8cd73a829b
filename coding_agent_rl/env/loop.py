"""The native multi-turn loop: generate on token ids, step the environment, append, repeat.

Sampled tokens get loss mask 1, observation deltas (``encoding.py``) loss mask 0; pictures add
their expanded tokens and travel as ``image_data``. How an episode ends (``Episode.end``) and how
failing steps are retried: docs/modules/env.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from coding_agent_rl.env.base import EnvError, FatalEnvError, call, split_reset, split_step
from coding_agent_rl.env.encoding import ChatEncoder, Encoded, ObservationError
from coding_agent_rl.env.episode import ABORTED, TRUNCATED, Episode, LoopConfig
from coding_agent_rl.env.turns import TurnRecord, preview, turn_event
from coding_agent_rl.errors import FailureKind
from coding_agent_rl.model.errors import PolicyRejected, UpstreamError

log = logging.getLogger(__name__)

BACKOFF_CAP_S = 5.0


class Engine(Protocol):
    """What the loop generates with: :class:`~coding_agent_rl.model.sglang.SGLangClient`."""

    async def generate(
        self, input_ids: list[int], sampling_params: dict[str, Any], *, routing_key: str
    ) -> Any:
        """Called with ``image_data=[...]`` too (every image in ``input_ids``, in order) once
        the episode holds images."""


@dataclasses.dataclass(frozen=True)
class _End:
    """How the episode ends, when a step ends it: ``end`` / ``status`` / ``reason`` / ``kind``.
    Steps return it (None: go on); no exception carries it."""

    end: str
    status: str
    reason: str | None = None
    kind: FailureKind | None = None


TurnHook = Callable[[TurnRecord], Awaitable[None] | None]


class _Loop:
    def __init__(
        self,
        env: Any,
        engine: Engine,
        encoder: ChatEncoder,
        config: LoopConfig,
        sampling_params: dict[str, Any],
        routing_key: str,
    ):
        self.env, self.engine, self.encoder, self.config = env, engine, encoder, config
        self.sampling = dict(sampling_params or {})
        self.routing_key = routing_key
        self.tokens: list[int] = []
        self.tools: list[dict] | None = None
        self.ep = Episode(prompt_ids=[])

    # ---- budgets ------------------------------------------------------------------------------
    def room(self) -> tuple[int | None, str]:
        """Tokens that may still be appended, and which budget binds (None: unbounded)."""
        limits = []
        if self.config.max_context is not None:
            limits.append((self.config.max_context - len(self.tokens), "context_budget"))
        if self.config.max_response is not None:
            limits.append((self.config.max_response - len(self.ep.response_ids), "response_budget"))
        if not limits:
            return None, ""
        return min(limits)

    def params(self, room: int | None) -> dict[str, Any]:
        params = dict(self.sampling)
        if room is not None:
            asked = params.get("max_new_tokens")
            params["max_new_tokens"] = room if asked is None else min(int(asked), room)
        stops = set(params.get("stop_token_ids") or []) | set(self.encoder.stop_token_ids)
        params["stop_token_ids"] = sorted(stops)
        return params

    # ---- env calls with retries ---------------------------------------------------------------
    async def _guarded(self, fn: Any, *args: Any) -> Any:
        result = fn(*args)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, self.config.env_step_timeout_s)
        return result

    async def retrying(
        self, what: str, record: TurnRecord, fn: Any, *args: Any
    ) -> tuple[Any, _End | None]:
        """``fn(*args)`` with the turn's retry budget: ``(result, None)``, or the episode's end
        when the budget is spent (or the env failed for good)."""
        while True:
            try:
                return await self._guarded(fn, *args), None
            except asyncio.CancelledError:
                raise
            except FatalEnvError as e:
                return None, _End(
                    "env_failure", ABORTED, f"{what}: {type(e).__name__}: {e}", "infra"
                )
            except Exception as e:
                record.count_retry(e)
                if record.retries > self.config.max_env_retries_per_turn:
                    return None, _End(
                        "env_failure",
                        ABORTED,
                        f"{what} failed {record.retries} times "
                        f"(last: {type(e).__name__}: {str(e)[:300]})",
                        "infra",
                    )
                log.warning(
                    "%s failed (%s: %s); retry %d", what, type(e).__name__, e, record.retries
                )
                delay = self.config.env_retry_backoff_s * 2 ** (record.retries - 1)
                await asyncio.sleep(min(delay, BACKOFF_CAP_S))
                if isinstance(e, EnvError) and e.reset:
                    _, end = await self.retrying(f"{what} (reset)", record, self.env.reset)
                    if end is not None:
                        return None, end

    # ---- the episode --------------------------------------------------------------------------
    async def start(self, prompt: Any, tools: list[dict] | None) -> _End | None:
        t0 = time.perf_counter()
        setup = TurnRecord(index=-1)
        try:
            result, end = await self.retrying("env.reset", setup, self.env.reset)
        finally:
            self.ep.reset_retries = setup.retry_types
            self.ep.reset_s = time.perf_counter() - t0
        if end is not None:
            return end
        observation, info = split_reset(result)
        self.ep.reset_info = info
        if isinstance(observation, dict) and isinstance(observation.get("messages"), list):
            prompt = observation["messages"]
            tools = observation.get("tools", tools)
        self.tools = tools if tools is not None else getattr(self.env, "tools", None)
        try:
            if isinstance(prompt, str):
                encoded = self.encoder.prompt_text(prompt)
            elif isinstance(prompt, list):
                encoded = self.encoder.prompt(prompt, self.tools, images_used=0)
            else:
                what = f"no prompt: the sample's prompt is {type(prompt).__name__}"
                return _End("bad_observation", ABORTED, f"prompt: {what}", "data")
        except ObservationError as e:
            return _End("bad_observation", ABORTED, f"prompt: {e}", "data")
        self.ep.prompt_ids = list(encoded.ids)
        self.tokens = list(encoded.ids)
        self._add_media(encoded)
        room, budget = self.room()
        if room is not None and room <= 0:
            return _End(
                "prompt_too_long",
                ABORTED,
                f"the prompt is {len(self.tokens)} tokens: no room left under the {budget}",
                "data",
            )
        return None

    def _add_media(self, encoded: Encoded) -> None:
        """Images accumulate for SGLang; this turn's tensors are buffered (merged once at the
        end, ``sample.py``)."""
        self.ep.image_data.extend(encoded.image_data)
        if encoded.multimodal_train_inputs:
            self.ep.multimodal_train_chunks.append(encoded.multimodal_train_inputs)

    def _append(self, ids: list[int], logprobs: list[float] | None) -> None:
        self.tokens.extend(ids)
        self.ep.response_ids.extend(ids)
        self.ep.loss_mask.extend([1 if logprobs is not None else 0] * len(ids))
        self.ep.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    async def turn(
        self, index: int, last: bool, on_turn: TurnHook | None
    ) -> tuple[TurnRecord | None, _End | None]:
        """One turn and, when it ends the episode, how; its record is logged however the turn
        ends, and handed to ``on_turn`` when the episode goes on or ends done."""
        room, budget = self.room()
        if room is not None and room <= 0:
            return None, _End(budget, TRUNCATED, f"no room left under the {budget}")
        record = TurnRecord(index=index)
        t0 = time.perf_counter()
        try:
            end = await self._turn(record, room, budget, last)
        finally:
            record.loop_s = max(0.0, time.perf_counter() - t0 - record.generate_s - record.env_s)
            if record in self.ep.turns:
                turn_event(self.routing_key, record)
        if end is None and on_turn is not None:
            await call(on_turn, record)
        return record, end

    async def _turn(
        self, record: TurnRecord, room: int | None, budget: str, last: bool
    ) -> _End | None:
        params = self.params(room)
        t_gen = time.perf_counter()
        try:
            media = {"image_data": list(self.ep.image_data)} if self.ep.image_data else {}
            gen = await self.engine.generate(
                self.tokens, params, routing_key=self.routing_key, **media
            )
        except PolicyRejected as e:  # the request is prompt + sampled + observation tokens:
            # all of it the model's doing or its sandbox's, never evidence against us
            return _End("policy_rejected", TRUNCATED, f"policy server: {e}")
        except UpstreamError as e:  # infra only when a health probe confirmed the failure
            if e.infra_evidence:
                return _End("policy_error", ABORTED, f"policy server: {e}", "infra")
            return _End("policy_error", TRUNCATED, f"policy server (healthy): {e}")
        record.generate_s = time.perf_counter() - t_gen
        output, logprobs = list(gen.output_ids), list(gen.logprobs)
        cut = self._vision_token_at(output)
        if cut is not None:  # kept up to it: no engine takes a stray image token back as input
            output, logprobs = output[:cut], logprobs[:cut]
        record.sampled, record.finish = len(output), gen.finish_reason
        self._append(output, logprobs)
        if getattr(gen, "weight_version", None) is not None:
            self.ep.weight_versions.append(gen.weight_version)
        self.ep.turns.append(record)
        if gen.finish_reason == "abort":
            return _End("abort", ABORTED, "the engine aborted the request", "infra")
        if cut is not None:
            return _End(
                "vision_token",
                TRUNCATED,
                f"the policy sampled an image token (id {gen.output_ids[cut]}); "
                f"the turn is kept up to it",
            )
        if gen.finish_reason == "length":
            capped = room is not None and params["max_new_tokens"] >= room
            if capped or self.config.stop_on_length:
                end = budget if capped else "length"
                return _End(end, TRUNCATED, f"generation stopped at {len(gen.output_ids)} tokens")
        text = self.encoder.decode(gen.output_ids)
        record.action = preview(text, self.config.preview_chars)
        t_env = time.perf_counter()
        result, stopped = await self.retrying("env.step", record, self.env.step, text)
        record.env_s = time.perf_counter() - t_env
        if stopped is not None:
            return stopped
        try:
            observation, done, info = split_step(result)
        except ValueError as e:
            return _End("env_failure", ABORTED, str(e), "infra")
        record.done = done
        record.set_info(info)
        if not done and not last:
            return await self._observe(record, observation, gen.finish_reason)
        return None

    def _vision_token_at(self, output: list[int]) -> int | None:
        """Where a VLM policy sampled one of its vision special tokens, if it did."""
        vision = getattr(self.encoder, "vision", None)
        if vision is None:
            return None
        special = {vision.pad_id, vision.start_id, vision.end_id}
        return next((i for i, t in enumerate(output) if t in special), None)

    async def _observe(self, record: TurnRecord, observation: Any, finish: str) -> _End | None:
        if isinstance(observation, dict) and "obs_str" in observation:
            record.observation = preview(str(observation["obs_str"]), self.config.preview_chars)
        try:
            message = self.env.format_observation(observation)
            encoded = self.encoder.observation(
                self.tokens, finish, message, self.tools, images_used=len(self.ep.image_data)
            )
        except ObservationError as e:
            return _End("bad_observation", ABORTED, f"observation: {e}", "infra")
        room, budget = self.room()
        if room is not None and len(encoded.ids) >= room:  # one sampled token must still fit
            return _End(
                budget,
                TRUNCATED,
                f"the observation ({len(encoded.ids)} tokens) does not fit the {budget}",
            )
        self._append(encoded.ids, None)
        self._add_media(encoded)
        record.observation_tokens = len(encoded.ids)
        return None


async def run_episode(
    env: Any,
    *,
    engine: Engine,
    encoder: ChatEncoder,
    sampling_params: dict[str, Any] | None = None,
    config: LoopConfig | None = None,
    routing_key: str = "",
    prompt: Any = None,
    tools: list[dict] | None = None,
    on_turn: TurnHook | None = None,
) -> Episode:
    """Run ``env`` to its end. ``prompt`` / ``tools``: the sample's prompt (chat messages, or
    text already chat-formatted) used unless ``reset`` returns ``{"messages": ...}``.

    Never raises for an environment or policy failure (the episode ends ``aborted``); the caller
    closes the environment. Cancellation propagates.
    """
    config = config or LoopConfig()
    loop = _Loop(env, engine, encoder, config, sampling_params or {}, routing_key)
    end = await loop.start(prompt, tools)
    if end is None:
        for index in range(config.max_turns):
            record, end = await loop.turn(index, index + 1 == config.max_turns, on_turn)
            if end is not None or (record is not None and record.done):
                break
        else:
            loop.ep.end = "max_turns"
    if end is not None:
        ep = loop.ep
        ep.end, ep.status, ep.reason, ep.failure_kind = end.end, end.status, end.reason, end.kind
    return loop.ep
