"""A session's recorded turns -> token-exact training samples (siblings sharing one rollout_id).

Chains (:mod:`.tree`), labels (:mod:`.segments`), then one sample per run of turns whose tokens
continue each other (:mod:`.drift`); ``loss_mask`` is 1 exactly on the sampled tokens a sample
trains; replayed turns (a branch's prefix) never are. The rules (trained once, aux chains,
budgets, order, weight versions, pictures, reward): docs/modules/trajectory.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from coding_agent_rl.multimodal.buffer import merge_chunks
from coding_agent_rl.trajectory.drift import DEFAULT_REALIGN_MAX, Continuation, Drift
from coding_agent_rl.trajectory.reward import RewardMode, assign_reward
from coding_agent_rl.trajectory.segments import (
    AUX,
    DEFAULT_SUBAGENT_TOOLS,
    FINAL,
    SUBAGENT,
    Segment,
    label_chains,
)
from coding_agent_rl.trajectory.tree import build_chains
from coding_agent_rl.trajectory.turn import Turn
from coding_agent_rl.types import Sample, Status

_RANK = {AUX: 0, FINAL: 2}  # everything else ranks 1


@dataclasses.dataclass
class _Draft:
    turns: list[Turn]
    tokens: list[int] = dataclasses.field(default_factory=list)
    mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    spans: list[list[int]] = dataclasses.field(default_factory=list)  # [turn, offset, length]
    realigned: int = 0
    truncation: str | None = None


def _pieces(
    links: Sequence[Continuation | None], turns: Sequence[Turn]
) -> Iterator[list[tuple[Turn, Continuation | None]]]:
    """Split a chain where its tokens fork."""
    piece: list[tuple[Turn, Continuation | None]] = []
    for turn, link in zip(turns, links, strict=True):
        if piece and (link is None or link.kind is Drift.FORK):
            yield piece
            piece = []
        piece.append((turn, None if not piece else link))
    if piece:
        yield piece


def _append_output(d: _Draft, turn: Turn, trained: bool) -> None:
    out = turn.output_ids
    if len(turn.output_logprobs) != len(out):
        raise ValueError(
            f"turn {turn.index}: {len(turn.output_logprobs)} logprobs for {len(out)} output ids"
        )
    if trained and out:
        d.spans.append([turn.index, len(d.tokens), len(out)])
    d.tokens.extend(out)
    d.mask.extend([1 if trained else 0] * len(out))
    d.logprobs.extend([float(x) for x in turn.output_logprobs] if trained else [0.0] * len(out))


def _cut(d: _Draft, end: int) -> int:
    """Keep ``tokens[:end]``; return how many trained tokens were removed."""
    removed = 0
    for span in d.spans:
        over = span[1] + span[2] - max(end, span[1])
        if over > 0:
            removed += over
            span[2] -= over
    d.spans = [s for s in d.spans if s[2] > 0]
    del d.tokens[end:], d.mask[end:], d.logprobs[end:]
    return removed


def _owned_by(
    owner: dict[int, int], seg_id: int, train: Callable[[Turn], bool] | None, turn: Turn
) -> bool:
    """Whether ``turn`` is trained in the segment ``seg_id`` (its highest-ranked chain): never
    a replayed turn (a branch's prefix is trained in its root), nor one ``train`` refuses."""
    if turn.replay is not None or (train is not None and not train(turn)):
        return False
    return owner.get(turn.index) == seg_id


def _draft(piece: list[tuple[Turn, Continuation | None]], owned: Callable[[Turn], bool]) -> _Draft:
    first = piece[0][0]
    d = _Draft(turns=[t for t, _ in piece])
    d.tokens = list(first.prompt_ids)
    d.mask = [0] * len(d.tokens)
    d.logprobs = [0.0] * len(d.tokens)
    _append_output(d, first, owned(first))
    for turn, link in piece[1:]:
        assert link is not None
        if link.kind is Drift.REALIGN:
            d.realigned += _cut(d, link.at)
        extra = turn.prompt_ids[len(d.tokens) :]
        d.tokens.extend(extra)
        d.mask.extend([0] * len(extra))
        d.logprobs.extend([0.0] * len(extra))
        _append_output(d, turn, owned(turn))
    finish = piece[-1][0].finish_reason
    d.truncation = finish if finish in ("length", "abort") else None
    return d


def _fit(d: _Draft, max_context: int | None, max_response: int | None) -> int | None:
    """Apply the budgets; return where the response starts, or None to drop the sample."""
    if not d.spans:
        return None
    start = d.spans[0][1]
    end = d.spans[-1][1] + d.spans[-1][2]
    if max_context is not None and end > max_context:
        end, d.truncation = max_context, "context"
    if max_response is not None and end - start > max_response:
        end, d.truncation = start + max_response, "response"
    _cut(d, end)
    if not d.spans:
        return None
    _cut(d, d.spans[-1][1] + d.spans[-1][2])  # no trailing untrained tokens
    return start


def build_samples(
    turns: Sequence[Turn],
    base: Sample,
    *,
    reward: float | None,
    reward_mode: RewardMode = "full",
    max_context: int | None = None,
    max_response: int | None = None,
    subagent_tools: Sequence[str] = DEFAULT_SUBAGENT_TOOLS,
    realign_max: int = DEFAULT_REALIGN_MAX,
    include_aux: bool = False,
    decode: Callable[[list[int]], str] | None = None,
    train: Callable[[Turn], bool] | None = None,
) -> list[Sample]:
    """The session's training samples; ``[]`` when no sampled token is left to train.
    ``train``: only the turns it accepts are trained (the rest stay as context), e.g. one
    stretch of a tree's root between branch points (trajectory/branching.py)."""
    if not turns:
        return []
    if len({t.session_id for t in turns}) > 1:
        raise ValueError("build_samples takes the turns of ONE session")
    segments = label_chains(build_chains(turns, realign_max), subagent_tools=subagent_tools)
    kept = [s for s in segments if include_aux or s.label != AUX]
    owner: dict[int, int] = {}
    for s in sorted(kept, key=lambda s: (_RANK.get(s.label, 1), s.chain.leaf.index)):
        for t in s.chain.turns:
            owner[t.index] = id(s)  # the highest-ranked, latest chain wins
    ordered = sorted(kept, key=lambda s: (s.label == FINAL, s.chain.leaf.index))
    drafts: list[tuple[Segment, _Draft, int]] = []
    for seg in ordered:
        for piece in _pieces(seg.chain.links, seg.chain.turns):
            d = _draft(piece, functools.partial(_owned_by, owner, id(seg), train))
            start = _fit(d, max_context, max_response)
            if start is not None:
                drafts.append((seg, d, start))

    rollout_id = base.rollout_id if base.rollout_id is not None else base.index
    session_id = base.session_id or turns[0].session_id
    if rollout_id is None:
        rollout_id = session_id
    samples = []
    for i, (seg, d, start) in enumerate(drafts):
        samples.append(
            dataclasses.replace(
                base,
                rollout_id=rollout_id,
                session_id=session_id,
                tokens=d.tokens,
                response_length=len(d.tokens) - start,
                loss_mask=d.mask[start:],
                rollout_log_probs=d.logprobs[start:],
                response=decode(d.tokens[start:]) if decode is not None else "",
                status=Status.TRUNCATED if d.truncation else Status.COMPLETED,
                remove_sample=False,
                weight_versions=[*base.weight_versions, *_versions(d)],
                metadata={**base.metadata, **_labels(seg, d, i, len(drafts))},
                **_media(d),
            )
        )
    assign_reward(samples, reward, reward_mode)
    return samples


def _media(d: _Draft) -> dict[str, Any]:
    """The sample's multimodal fields: the last turn's images that its tokens still hold."""
    leaf = d.turns[-1]
    if not leaf.images:
        return {}
    held = [
        item
        for item, end in zip(leaf.images, leaf.image_ends, strict=False)
        if end <= len(d.tokens)
    ]
    if not held:
        return {}
    return {
        "multimodal_inputs": {"images": [item.ref.data_url for item in held]},
        "multimodal_train_inputs": merge_chunks([item.train for item in held]),
    }


def _versions(d: _Draft) -> list[str]:
    by_index = {t.index: t for t in d.turns}
    versions = (by_index[index].weight_version for index, _, _ in d.spans)
    return [v for v in versions if v is not None]


def _labels(seg: Segment, d: _Draft, i: int, k: int) -> dict[str, Any]:
    trained = {s[0] for s in d.spans}
    by_index = {t.index: t for t in d.turns}
    meta: dict[str, Any] = {
        "segment": seg.label,
        "segment_index": i,
        "num_segments": k,
        "turns": len(trained),
        "turn_range": [d.turns[0].index, d.turns[-1].index],
        "trained_turns": [list(s) for s in d.spans],
        "truncated": d.truncation is not None,
        "truncation_reason": d.truncation,
        "ill_formed": any(by_index[j].ill_formed for j in trained),
        "use_tool": any(bool(by_index[j].assistant.get("tool_calls")) for j in trained),
        "realigned_tokens": d.realigned,
    }
    if seg.label == SUBAGENT:
        meta["dispatch_turn"] = seg.dispatch_turn
        meta["subagent_result_turn"] = seg.result_turn
    if seg.aux_reason:
        meta["aux_reason"] = seg.aux_reason
    return meta
