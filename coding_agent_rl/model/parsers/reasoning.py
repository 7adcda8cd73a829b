"""Reasoning parser ``qwen3``: ``<think>...</think>`` before the answer.

Cases, in the order they are tried:
* the text opens ``<think>``: reasoning runs to ``</think>``, or to a ``<tool_call>`` (Qwen3
  models sometimes call a tool without closing), or to the end (a ``length`` finish);
* the generation prompt already opened ``<think>`` (``reasoning_started``, or a ``</think>`` that
  comes before any ``<tool_call>``): the text up to ``</think>`` is reasoning;
* otherwise there is no reasoning.
"""

from __future__ import annotations

import dataclasses

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN = "<tool_call>"


@dataclasses.dataclass
class ReasoningSplit:
    reasoning: str
    rest: str


class Qwen3Reasoning:
    name = "qwen3"

    def split(self, text: str, *, reasoning_started: bool = False) -> ReasoningSplit:
        stripped = text.lstrip()
        if stripped.startswith(THINK_OPEN):
            return self._until_end(stripped[len(THINK_OPEN) :])
        close, tool = text.find(THINK_CLOSE), text.find(TOOL_OPEN)
        if reasoning_started or (close >= 0 and (tool < 0 or close < tool)):
            return self._until_end(text)
        return ReasoningSplit("", text)

    @staticmethod
    def _until_end(body: str) -> ReasoningSplit:
        close, tool = body.find(THINK_CLOSE), body.find(TOOL_OPEN)
        if close >= 0 and (tool < 0 or close < tool):
            return ReasoningSplit(body[:close].strip(), body[close + len(THINK_CLOSE) :])
        if tool >= 0:
            return ReasoningSplit(body[:tool].strip(), body[tool:])
        return ReasoningSplit(body.strip(), "")
