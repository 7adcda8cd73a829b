"""Prefix replay: answer a session's first requests with another rollout's recorded completions.

To branch rollout R at turn k, a fresh sandbox runs the same CLI on the same prompt in a session
opened with a :class:`ReplayPlan` of R's first k turns. Each request of that session takes one
recorded turn (the one whose prompt ids equal the request's; else the one an unrecorded request
with the same prompt took, as the client retries a dropped reply; else the earliest one not yet
taken) and is answered with its ``output_ids`` instead of a policy call: the CLI gets the same
reply it got in R, its tools run again in the new sandbox, and once the k turns are taken the
policy samples as usual.

Divergence: the request's rendered prompt ids are compared with the recorded turn's. Where they
differ (a timestamp in a tool output, a CLI that words a request differently) the turn still
gets the recorded reply and carries :attr:`ReplayMark.diverged` with the first differing token
index and a decoded snippet of both sides; replayed turns are never trained in the branch either
way (docs/design.md "Trees").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from coding_agent_rl.trajectory.turn import Turn

SNIPPET_TOKENS = 24  # tokens decoded on each side of a divergence


@dataclasses.dataclass(frozen=True)
class ReplayedTurn:
    """What a replay needs of one recorded turn (picklable: it crosses to adapter processes)."""

    index: int
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    finish_reason: str
    matched_stop: str | None = None  # a stop string the reply's text is cut at


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    """The recorded turns a branch replays, in the root's recording order."""

    turns: tuple[ReplayedTurn, ...]

    @classmethod
    def from_turns(cls, turns: Sequence[Turn], k: int) -> ReplayPlan:
        """The first ``k`` turns of a rollout (by recording index)."""
        ordered = sorted(turns, key=lambda t: t.index)
        if not 0 < k <= len(ordered):
            raise ValueError(f"cannot branch at turn {k}: the rollout has {len(ordered)} turns")
        return cls(
            tuple(
                ReplayedTurn(
                    t.index,
                    tuple(t.prompt_ids),
                    tuple(t.output_ids),
                    t.finish_reason,
                    t.matched_stop,
                )
                for t in ordered[:k]
            )
        )


@dataclasses.dataclass
class ReplayMark:
    """How one request was replayed: which recorded turn answered it, and any divergence."""

    of: int  # the recorded turn's index in the replayed rollout
    diverged: bool = False
    first_diff: int | None = None  # first differing prompt token index
    prompt_len: int = 0
    recorded_len: int = 0
    ours: str = ""  # decoded prompt tokens from first_diff on (this request)
    recorded: str = ""  # decoded prompt tokens from first_diff on (the recorded turn)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (the shorter length when one is a prefix of
    the other); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class ReplayState:
    """A session's replay: which recorded turns are still to be taken, and those taken by a
    request not recorded yet (its reply may never reach the client: the client's retry, the
    same prompt, takes the same turn again rather than the next one)."""

    def __init__(self, plan: ReplayPlan):
        self.plan = plan
        self.left: list[ReplayedTurn] = list(plan.turns)
        self.pending: dict[int, tuple[int, ...]] = {}  # taken, unrecorded: index -> request ids

    @property
    def done(self) -> bool:
        return not self.left

    def take(
        self, prompt_ids: Sequence[int], decode: Callable[[list[int]], str]
    ) -> tuple[ReplayedTurn, ReplayMark] | None:
        """The recorded turn answering a request with ``prompt_ids`` (None once all are taken)."""
        if not self.left and not self.pending:
            return None
        ids = tuple(prompt_ids)
        pick = next((t for t in self.left if t.prompt_ids == ids), None)
        if pick is None:  # a retry of a request not recorded
            pick = next((t for t in self.plan.turns if self.pending.get(t.index) == ids), None)
        if pick is None:
            if not self.left:
                return None
            pick = self.left[0]
        if pick in self.left:
            self.left.remove(pick)
        self.pending[pick.index] = ids
        mark = ReplayMark(of=pick.index, prompt_len=len(ids), recorded_len=len(pick.prompt_ids))
        at = first_difference(ids, pick.prompt_ids)
        if at is not None:
            mark.diverged, mark.first_diff = True, at
            mark.ours = decode(list(ids[at : at + SNIPPET_TOKENS]))
            mark.recorded = decode(list(pick.prompt_ids[at : at + SNIPPET_TOKENS]))
        return pick, mark

    def recorded(self, of: int) -> None:
        """The request the recorded turn ``of`` answered is recorded: it is used up."""
        self.pending.pop(of, None)
