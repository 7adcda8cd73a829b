"""Prompt and observation tokens for the native loop: the dummy-messages delta.

The prompt is rendered once with the chat template. After that the sample's tokens are never
re-rendered: each observation's tokens are the *delta* the template adds for the new message(s)
after a finished assistant turn (:meth:`Renderer.delta`: a fixed dummy conversation ending in an
assistant turn with a sentinel, rendered with and without the new messages, keeping only what
follows; the system/tool preamble is never repeated). The result equals a full render of the same
history (tested on canonical histories for the Qwen3-style template and a Llama-3-style one);
unlike trimming by the token count of a rendered dummy prefix it also closes the previous turn
the way the template does (the ``\\n`` after ``<|im_end|>``, the whole end marker after a
``length`` finish) and never lets BPE merge across the cut.

Images (R2-8): :class:`Encoded` already carries the fields a processor fills per turn
(``image_data`` for SGLang, ``multimodal_inputs``, ``multimodal_train_inputs``); this text encoder
refuses an observation with images with a clear error instead of dropping them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coding_agent_rl.adapter.render import Renderer

IMAGE_PART_TYPES = ("image", "image_url", "input_image", "video")


class ObservationError(ValueError):
    """An observation the encoder cannot turn into tokens (an env/config problem, not the
    model's)."""


@dataclasses.dataclass
class Encoded:
    """Tokens for one prompt or observation, and (R2-8) what a processor adds for its images."""

    ids: list[int]
    image_data: list[Any] = dataclasses.field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None


def as_messages(message: Any) -> list[dict[str, Any]]:
    """``format_observation``'s result as a list of messages (one dict or a list of dicts)."""
    messages = message if isinstance(message, list) else [message]
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ObservationError(
                f"format_observation must return a message dict (or a list of them), got {m!r:.200}"
            )
    return messages


def _has_images(messages: list[dict[str, Any]]) -> bool:
    for m in messages:
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES for part in content
        ):
            return True
    return False


class ChatEncoder:
    """Token ids for the native loop from a tokenizer with a chat template (ours or any HF one).

    ``chat_template`` overrides the tokenizer's; ``template_kwargs`` are passed to the template
    (e.g. ``enable_thinking``).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ):
        self.tokenizer = tokenizer
        self.renderer = Renderer(
            tokenizer, chat_template=chat_template, template_kwargs=template_kwargs
        )

    @property
    def stop_token_ids(self) -> list[int]:
        return self.renderer.stop_token_ids

    def _text_only(self, messages: list[dict[str, Any]]) -> None:
        if _has_images(messages):
            raise ObservationError(
                "the observation carries images but this encoder is text-only "
                "(a multimodal processor is needed for image observations)"
            )

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict] | None) -> Encoded:
        """The first prompt: the whole conversation rendered with the generation prompt."""
        messages = as_messages(messages)
        self._text_only(messages)
        return Encoded(self.renderer.render(messages, tools))

    def prompt_text(self, text: str) -> Encoded:
        """A prompt that is already chat-formatted text (slime's ``--apply-chat-template``)."""
        return Encoded(list(self.tokenizer.encode(text, add_special_tokens=False)))

    def observation(
        self,
        tokens: list[int],
        finish: str,
        message: Any,
        tools: list[dict] | None,
    ) -> Encoded:
        """The tokens to append after ``tokens`` (which end with a turn that finished with
        ``finish``) for the observation message(s)."""
        messages = as_messages(message)
        self._text_only(messages)
        return Encoded(self.renderer.delta(tokens, finish, messages, tools))

    def decode(self, ids: list[int]) -> str:
        """The response text an environment sees (special tokens dropped, as SGLang's ``text``)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)
