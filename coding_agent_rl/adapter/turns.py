"""One agent turn, wire-neutral: render the prompt, generate, parse, build the Turn record.

Rendering is where token-exactness is won or lost. A request that continues a recorded turn T
(its messages start with ``T.messages + [T.assistant]``, same tools, and only tool/user/system
messages follow) reuses ``T.prompt_ids + T.output_ids`` verbatim and renders only the new
messages; anything else (compaction, a subagent's own conversation, an edited history) is
rendered in full with ``parent=None`` and left to the trajectory layer to split. Images in the
rendered messages go through ``images.py`` (the VLM's expansion, or the text-only placeholder);
every image of the prompt is sent as ``image_data`` and kept on the turn.

A generation that SGLang ends with ``finish_reason: abort`` (our own cancellations never return
one) means the trainer aborted the engines: the engine remembers the session as aborted
(:meth:`TurnEngine.aborted`), answers this and every later request of it with
:class:`PolicyAborted` (503, not retried) and records nothing; the rollout reads it and ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from typing import Any

from coding_agent_rl.adapter.canonical import message_key, tools_key
from coding_agent_rl.adapter.errors import PolicyAborted, from_model_error
from coding_agent_rl.adapter.pictures import ImagePath
from coding_agent_rl.adapter.replay import ReplayedTurn
from coding_agent_rl.adapter.sessions import RecordedTurn, Session, SessionConfig
from coding_agent_rl.adapter.wire import Reply, WireRequest
from coding_agent_rl.model.errors import ModelError
from coding_agent_rl.model.parsers import parse_assistant
from coding_agent_rl.model.render import Renderer
from coding_agent_rl.model.sglang import Generation, SGLangClient, empty_length_generation
from coding_agent_rl.multimodal.parts import ImageSettings
from coding_agent_rl.trajectory.turn import Turn

log = logging.getLogger(__name__)

APPENDABLE_ROLES = ("user", "tool", "system")
# Full renders of long histories take tens of ms; above this many messages run them off the loop.
THREAD_RENDER_MIN_MESSAGES = 8


@dataclasses.dataclass
class PreparedTurn:
    request: WireRequest
    prompt_ids: list[int]
    parent: int | None
    keys: tuple[bytes, ...]
    tools_key: bytes
    sampling: dict[str, Any]
    budget_left: bool
    routing_key: str | None = None  # the session's ``routing_key`` metadata, if it has one
    images: list[Any] = dataclasses.field(default_factory=list)  # every image in prompt_ids
    image_ends: list[int] = dataclasses.field(default_factory=list)
    replay: ReplayedTurn | None = None  # the recorded turn answering it (a branch's prefix)
    replay_mark: dict[str, Any] | None = None  # adapter/replay.py ReplayMark, as a dict


def find_parent(
    recorded: list[RecordedTurn], keys: tuple[bytes, ...], tkey: bytes, messages: list[dict]
) -> RecordedTurn | None:
    """The most recent turn this conversation continues with only appended tool/user messages."""
    for rec in reversed(recorded):
        n = len(rec.prefix_keys)
        if rec.tools_key != tkey or len(keys) <= n or keys[: n - 1] != rec.prefix_keys[: n - 1]:
            continue
        if keys[n - 1] != rec.prefix_keys[n - 1] and not same_calls(
            messages[n - 1], rec.turn.assistant
        ):
            continue
        if all(m.get("role") in APPENDABLE_ROLES for m in messages[n:]):
            return rec
    return None


def same_calls(echo: dict[str, Any], sampled: dict[str, Any]) -> bool:
    """Whether the client's echo of our reply is that reply with edited tool arguments.

    CLIs rewrite arguments before echoing them back (Claude Code drops a leading
    ``cd <cwd> &&`` from Bash commands); the sampled tokens stay the truth, so an echo with the
    same text and the same calls in the same order still continues the turn.
    """

    def names(m: dict[str, Any]) -> list[Any]:
        return [c.get("function", c).get("name") for c in m.get("tool_calls") or []]

    return (
        echo.get("role") == "assistant"
        and (echo.get("content") or "").strip() == (sampled.get("content") or "").strip()
        and bool(names(sampled))
        and names(echo) == names(sampled)
    )


def sampling_params(
    server_defaults: dict[str, Any],
    config: SessionConfig,
    requested: dict[str, Any],
    prompt_len: int,
    max_context: int | None,
    stop_token_ids: list[int],
) -> tuple[dict[str, Any], bool]:
    """SGLang sampling params and whether any room is left for output.

    Order: server defaults < session defaults < the request < session-fixed values; a fixed
    ``max_new_tokens`` is a cap. The context budget caps ``max_new_tokens`` at
    ``max_context - len(prompt)``.
    """
    fixed = dict(config.sampling_fixed)
    cap = fixed.pop("max_new_tokens", None)
    params = {**server_defaults, **config.sampling_defaults, **requested, **fixed}
    limits = [v for v in (params.get("max_new_tokens"), cap) if v is not None]
    if max_context is not None:
        limits.append(max_context - prompt_len)
    if limits:
        params["max_new_tokens"] = max(0, int(min(limits)))
    params["stop_token_ids"] = sorted({*(params.get("stop_token_ids") or []), *stop_token_ids})
    # Decoding is done here from the ids; SGLang's text is not used.
    params.setdefault("skip_special_tokens", False)
    return params, params.get("max_new_tokens", 1) > 0


class TurnEngine:
    def __init__(
        self,
        renderer: Renderer,
        sglang: SGLangClient,
        *,
        tool_parser: str | None,
        reasoning_parser: str | None,
        max_context: int | None = None,
        sampling_defaults: dict[str, Any] | None = None,
        images: ImagePath | None = None,
    ):
        self.images = images or ImagePath(ImageSettings(), None)
        self.renderer = renderer
        self.tokenizer = renderer.tokenizer
        self.sglang = sglang
        self.tool_parser = tool_parser
        self.reasoning_parser = reasoning_parser
        self.max_context = max_context
        self.sampling_defaults = dict(sampling_defaults or {})
        self._aborted: dict[str, str] = {}  # sid -> why; read from the rollout's thread
        self._aborted_lock = threading.Lock()

    def aborted(self, sid: str) -> str | None:
        """Why the policy server aborted a request of ``sid`` (None: it did not)."""
        with self._aborted_lock:
            return self._aborted.get(sid)

    def forget(self, sid: str) -> None:
        """Drop what is remembered about ``sid`` (the rollout is over)."""
        with self._aborted_lock:
            self._aborted.pop(sid, None)

    def _refuse_if_aborted(self, sid: str) -> None:
        reason = self.aborted(sid)
        if reason is not None:
            raise PolicyAborted(f"the rollout was aborted: {reason}")

    async def prepare(
        self, session: Session, recorded: list[RecordedTurn], request: WireRequest
    ) -> PreparedTurn:
        self._refuse_if_aborted(session.sid)
        messages, tools = request.messages, request.tools
        keys = tuple(message_key(m) for m in messages)
        tkey = tools_key(tools)
        parent = find_parent(recorded, keys, tkey, messages)
        images: list[Any] = []
        if parent is not None:
            prev = parent.turn
            new = messages[len(parent.prefix_keys) :]
            prefix = prev.prompt_ids + prev.output_ids
            self.images.refuse_sampled_vision_tokens(prev.output_ids)
            delta, added = self.images.render(
                new,
                len(prev.images),
                False,
                lambda ms: self.renderer.delta(prefix, prev.finish_reason, ms, tools or None),
            )
            prompt_ids = prefix + delta
            images = [*prev.images, *added]
        else:

            def full() -> tuple[list[int], list[Any]]:
                return self.images.render(
                    messages, 0, True, lambda ms: self.renderer.render(ms, tools or None)
                )

            if len(messages) >= THREAD_RENDER_MIN_MESSAGES:
                prompt_ids, images = await asyncio.to_thread(full)
            else:
                prompt_ids, images = full()
        max_context = session.config.max_context or self.max_context
        sampling, room = sampling_params(
            self.sampling_defaults,
            session.config,
            request.sampling,
            len(prompt_ids),
            max_context,
            self.renderer.stop_token_ids,
        )
        replay = session.replay.take(prompt_ids, self._decode) if session.replay else None
        return PreparedTurn(
            request=request,
            prompt_ids=prompt_ids,
            parent=parent.turn.index if parent else None,
            keys=keys,
            tools_key=tkey,
            sampling=sampling,
            budget_left=room,
            routing_key=session.config.metadata.get("routing_key"),
            images=images,
            image_ends=self.images.ends(prompt_ids) if images else [],
            replay=replay[0] if replay else None,
            replay_mark=replay[1].to_dict() if replay else None,
        )

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    async def generate(self, prepared: PreparedTurn, sid: str) -> Generation:
        """SGLang's generation for ``prepared``; raises :class:`PolicyAborted` when the policy
        server aborted it (and from then on for the whole session)."""
        self._refuse_if_aborted(sid)
        if prepared.replay is not None:  # a branch's prefix: the recorded reply, no policy call
            out = list(prepared.replay.output_ids)
            replay = prepared.replay
            return Generation(out, [0.0] * len(out), replay.finish_reason, replay.matched_stop)
        if not prepared.budget_left:  # the context is full: an empty `length` turn, no call
            return empty_length_generation()
        media = {"image_data": [i.ref.data_url for i in prepared.images]} if prepared.images else {}
        try:
            gen = await self.sglang.generate(
                prepared.prompt_ids,
                prepared.sampling,
                routing_key=prepared.routing_key or sid,
                **media,
            )
        except ModelError as e:
            raise from_model_error(e) from e
        if gen.finish_reason == "abort":
            reason = f"the policy server aborted a request ({gen.abort_message})"
            with self._aborted_lock:
                self._aborted.setdefault(sid, reason)
            log.info("session %s: %s", sid, reason)
            raise PolicyAborted(reason)
        return gen

    def finish(
        self, session: Session, prepared: PreparedTurn, gen: Generation, wire: str
    ) -> tuple[Reply, RecordedTurn]:
        text = self.tokenizer.decode(gen.output_ids, skip_special_tokens=False)
        if gen.matched_stop and text.endswith(gen.matched_stop):
            text = text[: -len(gen.matched_stop)]
        request = prepared.request
        parsed = parse_assistant(
            text,
            request.tools,
            tool_parser=self.tool_parser,
            reasoning_parser=self.reasoning_parser,
            reasoning_started=self._prompt_opens_reasoning(prepared.prompt_ids),
        )
        if parsed.ill_formed:
            log.info("session %s: ill-formed tool call: %s", session.sid, "; ".join(parsed.errors))
        turn = Turn(
            session_id=session.sid,
            index=-1,  # assigned when recorded
            messages=request.messages,
            tools=request.tools,
            prompt_ids=prepared.prompt_ids,
            output_ids=gen.output_ids,
            output_logprobs=gen.logprobs,
            finish_reason=gen.finish_reason,
            assistant=parsed.message,
            ill_formed=parsed.ill_formed,
            parent=prepared.parent,
            wire=wire,
            latency_s=gen.latency_s,
            weight_version=gen.weight_version,
            images=prepared.images,
            image_ends=prepared.image_ends,
            replay=prepared.replay_mark,
            matched_stop=gen.matched_stop,
        )
        reply = Reply(
            model=request.model,
            message=parsed.message,
            finish_reason=gen.finish_reason,
            prompt_tokens=len(prepared.prompt_ids),
            completion_tokens=len(gen.output_ids),
            matched_stop=gen.matched_stop,
            cached_tokens=gen.cached_tokens,
        )
        recorded = RecordedTurn(
            turn=turn,
            prefix_keys=(*prepared.keys, message_key(parsed.message)),
            tools_key=prepared.tools_key,
        )
        return reply, recorded

    def _prompt_opens_reasoning(self, prompt_ids: list[int]) -> bool:
        """Whether the generation prompt already opened ``<think>`` (some templates do)."""
        tail = self.tokenizer.decode(prompt_ids[-4:], skip_special_tokens=False)
        return tail.rstrip().endswith("<think>")
