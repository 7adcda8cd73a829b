"""Prompt and observation tokens for the native loop: the dummy-messages delta.

The prompt is rendered once; each observation adds only the tokens the template adds for the
new messages (:meth:`Renderer.delta`), equal to a full render. Pictures become the VLM's expanded
placeholders (or the placeholder text for a text-only policy). Details: docs/modules/env.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coding_agent_rl.errors import EnvFailure
from coding_agent_rl.model.render import Renderer
from coding_agent_rl.multimodal.buffer import merge_chunks
from coding_agent_rl.multimodal.parts import ImageSettings, render_with_images


class ObservationError(EnvFailure, ValueError):
    """An observation the encoder cannot turn into tokens (an env/config problem, not the
    model's)."""


@dataclasses.dataclass
class Encoded:
    """Tokens for one prompt or observation, and what a processor adds for its images."""

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


class ChatEncoder:
    """Token ids for the native loop from a tokenizer with a chat template (ours or any HF one).

    ``chat_template`` overrides the tokenizer's; ``template_kwargs`` are passed to the template
    (e.g. ``enable_thinking``). ``vision``: the policy's image processor (a VLM), or None;
    ``images``: limits and the text-only placeholder policy.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        vision: Any = None,
        images: ImageSettings | None = None,
    ):
        self.tokenizer = tokenizer
        self.renderer = Renderer(
            tokenizer, chat_template=chat_template, template_kwargs=template_kwargs
        )
        self.vision = vision  # a coding_agent_rl.multimodal.VisionProcessor, or None
        self.images = images or ImageSettings()

    @property
    def stop_token_ids(self) -> list[int]:
        return self.renderer.stop_token_ids

    def _encode(
        self, messages: list[dict[str, Any]], used: int, full: bool, render: Any
    ) -> Encoded:
        try:
            ids, items = render_with_images(
                messages, self.images, self.vision, render, used=used, full=full
            )
        except ValueError as e:  # ImagesRefused, or placeholders that do not pair up
            raise ObservationError(str(e)) from e
        if not items:
            return Encoded(ids)
        urls = [item.ref.data_url for item in items]
        return Encoded(
            ids,
            image_data=urls,
            multimodal_inputs={"images": urls},
            multimodal_train_inputs=merge_chunks([item.train for item in items]),
        )

    def prompt(
        self, messages: list[dict[str, Any]], tools: list[dict] | None, *, images_used: int = 0
    ) -> Encoded:
        """The first prompt: the whole conversation rendered with the generation prompt."""
        messages = as_messages(messages)
        return self._encode(messages, images_used, True, lambda ms: self.renderer.render(ms, tools))

    def prompt_text(self, text: str) -> Encoded:
        """A prompt that is already chat-formatted text (slime's ``--apply-chat-template``)."""
        return Encoded(list(self.tokenizer.encode(text, add_special_tokens=False)))

    def observation(
        self,
        tokens: list[int],
        finish: str,
        message: Any,
        tools: list[dict] | None,
        *,
        images_used: int = 0,
    ) -> Encoded:
        """The tokens to append after ``tokens`` (which end with a turn that finished with
        ``finish``) for the observation message(s); ``images_used``: images already in the
        sample (the per-sample limit counts them)."""
        messages = as_messages(message)
        return self._encode(
            messages,
            images_used,
            False,
            lambda ms: self.renderer.delta(tokens, finish, ms, tools),
        )

    def decode(self, ids: list[int]) -> str:
        """The response text an environment sees (special tokens dropped, as SGLang's ``text``)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)
