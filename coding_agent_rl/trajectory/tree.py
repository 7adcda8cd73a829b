"""Per-session message tree, and the chains of turns read off it.

Turns that replay the same history share a trie path; each turn gets at most one predecessor
(the adapter's ``turn.parent``, else the deepest earlier turn it extends in messages and tokens).
A chain is the path from a root to a leaf. Details: docs/modules/trajectory.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

from coding_agent_rl.multimodal.parts import content_key
from coding_agent_rl.trajectory.drift import DEFAULT_REALIGN_MAX, Continuation, Drift, classify
from coding_agent_rl.trajectory.turn import Turn


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") if isinstance(b, dict) else str(b) for b in content]
        return "\n".join(p for p in parts if p)
    return str(content)


def parse_arguments(raw: Any) -> Any:
    """Tool-call arguments as an object when they are a JSON string."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def message_key(message: dict[str, Any]) -> str:
    """Identity of a canonical message for routing.

    Same tolerance as the adapter's matching: wire ids are ignored, text is compared stripped,
    tool arguments as parsed objects; ``reasoning_content`` and a tool message's ``name`` are
    ignored (clients drop or keep them at will; the recorded tokens are what count).
    """
    role = message.get("role")
    content = message.get("content")
    key = content_key(content) if isinstance(content, list) else text_of(content).strip()
    parts: list[Any] = [role, key]
    if role == "assistant":
        calls = []
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call)
            calls.append([fn.get("name"), parse_arguments(fn.get("arguments"))])
        parts.append(calls)
    return _dumps(parts)


def conversation_key(messages: Iterable[dict[str, Any]]) -> str:
    return _dumps([message_key(m) for m in messages])


class _Node:
    __slots__ = ("children", "turns")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.turns: list[int] = []


class MessageTree:
    """A trie of canonical messages; a turn is recorded at its assistant message's node."""

    def __init__(self) -> None:
        self.root = _Node()

    def insert(self, turn: Turn) -> None:
        node = self.root
        for message in [*turn.messages, turn.assistant]:
            node = node.children.setdefault(message_key(message), _Node())
        node.turns.append(turn.index)

    def deepest_turns(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """Turns at the deepest node along ``messages`` that holds any (recording order)."""
        node: _Node | None = self.root
        found: list[int] = []
        for message in messages:
            node = node.children.get(message_key(message)) if node is not None else None
            if node is None:
                break
            if node.turns:
                found = node.turns
        return list(found)


@dataclasses.dataclass
class Chain:
    """Turns from a root to a leaf; ``links[i]`` tells how ``turns[i]`` continues ``turns[i-1]``."""

    turns: list[Turn]
    links: list[Continuation | None]

    @property
    def leaf(self) -> Turn:
        return self.turns[-1]

    def indices(self) -> list[int]:
        return [t.index for t in self.turns]


def link_turns(
    turns: Sequence[Turn], realign_max: int = DEFAULT_REALIGN_MAX
) -> dict[int, tuple[int, Continuation]]:
    """``turn index -> (predecessor index, continuation)`` for every non-root turn."""
    by_index = {t.index: t for t in turns}
    tree = MessageTree()
    links: dict[int, tuple[int, Continuation]] = {}
    for turn in sorted(turns, key=lambda t: t.index):
        parent = by_index.get(turn.parent) if turn.parent is not None else None
        if parent is not None and parent.index < turn.index:
            cont = classify(parent.prompt_ids, parent.output_ids, turn.prompt_ids, realign_max)
            links[turn.index] = (parent.index, cont)
        else:
            for cand in reversed(tree.deepest_turns(turn.messages)):
                prev = by_index[cand]
                cont = classify(prev.prompt_ids, prev.output_ids, turn.prompt_ids, realign_max)
                if cont.kind is not Drift.FORK:
                    links[turn.index] = (cand, cont)
                    break
        tree.insert(turn)
    return links


def build_chains(turns: Sequence[Turn], realign_max: int = DEFAULT_REALIGN_MAX) -> list[Chain]:
    """Every root-to-leaf chain, ordered by the leaf's recording index."""
    by_index = {t.index: t for t in turns}
    if len(by_index) != len(turns):
        raise ValueError("turn indices must be unique within a session")
    links = link_turns(turns, realign_max)
    has_successor = {pred for pred, _ in links.values()}
    chains = []
    for leaf in sorted(turns, key=lambda t: t.index):
        if leaf.index in has_successor:
            continue
        path: list[Turn] = []
        conts: list[Continuation | None] = []
        i: int | None = leaf.index
        while i is not None:
            path.append(by_index[i])
            pred, cont = links.get(i, (None, None))
            conts.append(cont)
            i = pred
        chains.append(Chain(turns=path[::-1], links=conts[::-1]))
    return chains
