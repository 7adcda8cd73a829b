"""Canonical messages -> prompt token ids, in full or incrementally on top of stored tokens.

``render`` applies the chat template to a whole conversation. ``extend`` is the path every
agent turn after the first takes: it keeps the previous turn's ``prompt_ids + output_ids`` as they
were (sampled tokens are never re-tokenized) and appends only the tokens of the new tool/user
messages, found with the sentinel-delta technique: render a tiny fixed conversation ending in an
assistant turn that holds a unique sentinel, followed by the new messages; everything after
``sentinel + <end of assistant turn>`` is the delta. It starts with a special token
(``<|im_start|>``), so BPE never merges across the join and the delta text is encoded alone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

SENTINEL = "\u2063carl-sentinel-7f3a\u2063"  # invisible separators: never in real content
_DUMMY = ({"role": "user", "content": "."}, {"role": "assistant", "content": SENTINEL})
_PROBE_TOOL = {
    "type": "function",
    "function": {"name": "probe", "description": "p", "parameters": {"type": "object"}},
}
_PROBE_MESSAGES = (
    {"role": "tool", "name": "probe", "content": "a"},
    {"role": "tool", "name": "probe", "content": "b"},
    {"role": "user", "content": "c"},
)


@functools.lru_cache(maxsize=16)
def compile_template(source: str) -> Any:
    """A Jinja template compiled like transformers' ``apply_chat_template`` does it."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(jinja2.ext.Extension):
        # `{% generation %}` marks assistant text for HF's assistant masks; here it renders as is.
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _Generation]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def _encoder(tokenizer: Any) -> Callable[[str], list[int]]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch_fast"):
        # The Rust tokenizer directly, without computing character offsets (~1.5x faster).
        return lambda text: backend.encode_batch_fast([text], add_special_tokens=False)[0].ids
    if backend is not None:
        return lambda text: backend.encode(text, add_special_tokens=False).ids
    return lambda text: list(tokenizer.encode(text, add_special_tokens=False))


class Renderer:
    """Renders canonical messages (see ``trajectory/turn.py``) to prompt token ids."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ):
        source = chat_template or getattr(tokenizer, "chat_template", None)
        if not isinstance(source, str) or not source:
            raise ValueError("the tokenizer has no chat_template and none was given")
        self.tokenizer = tokenizer
        self.chat_template = source
        self._template = compile_template(source)
        self._encode = _encoder(tokenizer)
        # Special tokens a template may refer to (HF passes them the same way).
        special = {k: getattr(tokenizer, k, None) for k in ("bos_token", "eos_token", "pad_token")}
        self._kwargs = {**{k: v for k, v in special.items() if v}, **(template_kwargs or {})}
        self.stop_token_ids = self._stop_ids()
        self._end_text, self._end_ids = self._turn_end()
        self._delta_needs_tools = self._probe_delta()

    def _stop_ids(self) -> list[int]:
        ids: list[int] = []
        for token in ("<|im_end|>", getattr(self.tokenizer, "eos_token", None), "<|endoftext|>"):
            tid = self.tokenizer.convert_tokens_to_ids(token) if token else None
            if isinstance(tid, int) and tid not in ids and tid != self.tokenizer.unk_token_id:
                ids.append(tid)
        return ids

    def text(
        self, messages: list[dict], tools: list[dict] | None, *, add_generation_prompt: bool = True
    ) -> str:
        """The template's text for a conversation."""
        return self._template.render(
            messages=messages,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            **self._kwargs,
        )

    def render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """Full render with the generation prompt."""
        return self._encode(self.text(messages, tools))

    def count(self, messages: list[dict], tools: list[dict] | None) -> int:
        """The real number of prompt tokens (what ``render`` would send)."""
        return len(self.render(messages, tools))

    def _turn_end(self) -> tuple[str, list[int]]:
        """The text the template writes after an assistant's content (``<|im_end|>\\n``)."""
        rendered = self.text(list(_DUMMY), None, add_generation_prompt=False)
        at = rendered.rfind(SENTINEL)
        if at < 0:
            raise ValueError("chat template does not render assistant content verbatim")
        end = rendered[at + len(SENTINEL) :]
        return end, self._encode(end)

    def _probe_delta(self) -> bool:
        """Check the template fits the delta technique; True if the delta depends on ``tools``."""
        plain = self._delta_text(list(_PROBE_MESSAGES), None)
        first = self._encode(plain)[:1]
        special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        added = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
        if not first or (first[0] not in special and first[0] not in added):
            # The delta would be BPE-encoded against the previous turn's last characters.
            raise ValueError("chat template: a new turn does not start with a special token")
        return plain != self._delta_text(list(_PROBE_MESSAGES), [_PROBE_TOOL])

    def _delta_text(self, new_messages: list[dict], tools: list[dict] | None) -> str:
        rendered = self.text([*_DUMMY, *new_messages], tools)
        marker = SENTINEL + self._end_text
        at = rendered.find(marker)
        if at < 0:
            raise ValueError("chat template changed the sentinel turn; cannot render a delta")
        return rendered[at + len(marker) :]

    def canonical_output(self, message: dict) -> list[int]:
        """The tokens a model emits for ``message`` after the generation prompt, stop token
        included: what the template would render for that assistant turn. Used where a policy
        (scripted, replayed) or a benchmark needs "sampled" tokens that re-render exactly."""
        head = self.text([_DUMMY[0]], None)
        full = self.text([_DUMMY[0], message], None, add_generation_prompt=False)
        if not full.startswith(head) or not full.endswith(self._end_text):
            raise ValueError("the template's assistant turn does not extend its generation prompt")
        body = full[len(head) : len(full) - len(self._end_text)]
        return [*self._encode(body), *self._end_ids[:1]]

    def closing_ids(self, prefix_ids: list[int], prefix_finish: str) -> list[int]:
        """Tokens that close the previous assistant turn the way the template closes it.

        SGLang keeps the matched stop token, so a ``stop`` turn ends with ``<|im_end|>`` and needs
        only the ``\\n``; a ``length``/``abort`` turn (or one stopped by another token) has no end
        token, so the whole ``<|im_end|>\\n`` is appended. Sampled tokens are never changed.
        """
        end = self._end_ids
        if prefix_finish == "stop" and prefix_ids and end and prefix_ids[-1] == end[0]:
            return end[1:]
        return list(end)

    def extend(
        self,
        prefix_ids: list[int],
        prefix_finish: str,
        new_messages: list[dict],
        tools: list[dict] | None,
    ) -> list[int]:
        """The next prompt: ``prefix_ids`` (previous prompt + output, untouched) + the closing of
        that assistant turn + the new tool/user messages + the generation prompt.

        Give all tool results of one step in one call: the template groups consecutive tool
        messages into a single user turn.
        """
        ids = list(prefix_ids)  # one copy; the stored list is never mutated
        ids += self.delta(prefix_ids, prefix_finish, new_messages, tools)
        return ids

    def delta(
        self,
        prefix_ids: list[int],
        prefix_finish: str,
        new_messages: list[dict],
        tools: list[dict] | None,
    ) -> list[int]:
        """Only the tokens :meth:`extend` appends to ``prefix_ids`` (the closing of the previous
        assistant turn, the new messages, the generation prompt); ``prefix_ids`` is only read.
        The native multi-turn loop appends these to its sample as observation tokens."""
        for message in new_messages:
            if message.get("role") == "assistant":
                raise ValueError(
                    "extend() appends tool/user/system messages only; "
                    "assistant turns come from stored output tokens"
                )
        delta = self._delta_text(new_messages, tools if self._delta_needs_tools else None)
        return [*self.closing_ids(prefix_ids, prefix_finish), *self._encode(delta)]
