"""Label each chain of a session: ``final``, ``subagent``, ``wipe`` or ``aux``.

Real Claude Code interleaves all of these in one session; ``aux`` chains are not trained unless
asked for. The rules and their order: docs/modules/trajectory.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from coding_agent_rl.trajectory.tree import (
    Chain,
    conversation_key,
    message_key,
    parse_arguments,
    text_of,
)
from coding_agent_rl.trajectory.turn import Turn

SUBAGENT, WIPE, FINAL, AUX = "subagent", "wipe", "final", "aux"
# Claude Code's Task / Agent; Gemini CLI's invoke_agent (arguments agent_name, prompt).
DEFAULT_SUBAGENT_TOOLS = ("Task", "Agent", "invoke_agent")


@dataclasses.dataclass
class Segment:
    chain: Chain
    label: str
    dispatch_turn: int | None = None  # subagent: the turn whose tool call opened it
    result_turn: int | None = None  # subagent: first turn whose history holds the tool result
    aux_reason: str | None = None  # "retry" | "side"


@dataclasses.dataclass
class _Dispatch:
    turn: Turn
    call: int  # position among the turn's tool calls
    prompt: str
    result_turn: int | None


def _first(messages: Sequence[dict[str, Any]], role: str) -> dict[str, Any] | None:
    return next((m for m in messages if m.get("role") == role), None)


def _first_text(chain: Chain, role: str) -> str | None:
    m = _first(chain.turns[0].messages, role)
    return None if m is None else text_of(m.get("content")).strip()


def _result_turn(turn: Turn, call: int, chains: Sequence[Chain]) -> int | None:
    """First turn continuing ``turn`` whose history holds the result of its ``call``-th call."""
    key, at = message_key(turn.assistant), len(turn.messages)
    found = []
    for chain in chains:
        pos = next((i for i, t in enumerate(chain.turns) if t.index == turn.index), None)
        if pos is None or pos + 1 >= len(chain.turns):
            continue
        nxt = chain.turns[pos + 1]
        if len(nxt.messages) <= at or message_key(nxt.messages[at]) != key:
            continue
        results = 0
        for m in nxt.messages[at + 1 :]:
            if m.get("role") != "tool":
                break
            results += 1
        if results > call:
            found.append(nxt.index)
    return min(found, default=None)


def _dispatches(chains: Sequence[Chain], tools: Sequence[str]) -> list[_Dispatch]:
    turns = sorted({t.index: t for c in chains for t in c.turns}.values(), key=lambda t: t.index)
    out = []
    for turn in turns:
        for k, call in enumerate(turn.assistant.get("tool_calls") or []):
            fn = call.get("function", call)
            args = parse_arguments(fn.get("arguments"))
            prompt = args.get("prompt") if isinstance(args, dict) else None
            if fn.get("name") in tools and isinstance(prompt, str) and prompt.strip():
                out.append(_Dispatch(turn, k, prompt.strip(), _result_turn(turn, k, chains)))
    return out


def _resent(leaf: Turn, turns: Sequence[Turn]) -> bool:
    """Was the leaf's exact request sent again by a later turn?"""
    later = [t for t in turns if t.index > leaf.index and len(t.messages) == len(leaf.messages)]
    if not later:
        return False
    key = conversation_key(leaf.messages)
    return any(conversation_key(t.messages) == key for t in later)


def _subagent_of(
    chain: Chain, dispatches: Sequence[_Dispatch], chains_of: dict[int, Chain]
) -> _Dispatch | None:
    first = chain.turns[0].index
    user = _first_text(chain, "user")
    if not user:
        return None
    mine = set(chain.indices())
    own_system = _first_text(chain, "system")
    # Pass 1: dispatches still waiting for their tool result. Pass 2: any earlier dispatch: an
    # async dispatch (Claude Code's default background agents) gets an immediate "launched"
    # tool result, so its subagent starts after that result and answers later in a notification.
    for answered_ok in (False, True):
        for d in reversed(dispatches):
            if d.turn.index >= first or d.turn.index in mine:
                continue
            if not answered_ok and d.result_turn is not None and d.result_turn < first:
                continue  # that subagent had already answered (or was launched async)
            if user == d.prompt:
                return d
            their_system = _first_text(chains_of[d.turn.index], "system")
            if d.prompt in user and own_system != their_system:
                return d
    return None


def label_chains(
    chains: Sequence[Chain], *, subagent_tools: Sequence[str] = DEFAULT_SUBAGENT_TOOLS
) -> list[Segment]:
    """One :class:`Segment` per chain, same order."""
    turns = list({t.index: t for c in chains for t in c.turns}.values())
    chains_of = {i: c for c in chains for i in c.indices()}
    segments = [Segment(chain, "") for chain in chains]
    dispatches = _dispatches(chains, subagent_tools)
    for seg in segments:
        if _resent(seg.chain.leaf, turns):
            seg.label, seg.aux_reason = AUX, "retry"
        elif (d := _subagent_of(seg.chain, dispatches, chains_of)) is not None:
            seg.label, seg.dispatch_turn, seg.result_turn = SUBAGENT, d.turn.index, d.result_turn

    rest = [s for s in segments if not s.label]
    with_tools = [s for s in rest if any(t.tools for t in s.chain.turns)]
    pool = with_tools or rest
    if not pool:
        return segments
    final = max(pool, key=lambda s: s.chain.leaf.index)
    final.label = FINAL
    system = _first_text(final.chain, "system")
    main_users = {_first_text(final.chain, "user")}
    for s in rest:
        if system is not None and _first_text(s.chain, "system") == system:
            main_users.add(_first_text(s.chain, "user"))
    main_users.discard(None)
    for s in rest:
        if s.label:
            continue
        same_system = system is not None and _first_text(s.chain, "system") == system
        if same_system or _first_text(s.chain, "user") in main_users:
            s.label = WIPE
        else:
            s.label, s.aux_reason = AUX, "side"
    return segments
