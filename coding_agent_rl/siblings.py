"""One rollout's samples as a trainer's group holds them: a ``list`` that also answers the
per-sample reads slime's group-level code makes on each item of a group.

``status`` (ABORTED when any sibling is), ``reward`` (the rollout's undivided reward), any other
attribute from the last sample, and ``origin`` (the trainer's sample, to restart a requeued
rollout). Details: docs/modules/core.md.
"""

from __future__ import annotations

from typing import Any


class Siblings(list[Any]):
    """``list`` of one rollout's samples (objects of the trainer's class)."""

    origin: Any = None

    def __init__(self, samples: Any = (), origin: Any = None):
        super().__init__(samples)
        self.origin = origin

    def _last(self, name: str) -> Any:
        if not len(self):
            raise AttributeError(f"empty Siblings has no {name!r}")
        return list.__getitem__(self, -1)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._last(name), name)

    @property
    def status(self) -> Any:
        last = self._last("status")
        for s in self:
            if getattr(s.status, "value", s.status) == "aborted":
                return s.status
        return last.status

    @status.setter
    def status(self, value: Any) -> None:
        for s in self:
            s.status = value

    @property
    def reward(self) -> Any:
        last = self._last("reward")
        stored = (last.metadata or {}).get("rollout_reward")
        return stored if stored is not None else last.reward

    @reward.setter
    def reward(self, value: Any) -> None:
        for s in self:
            if s.reward is None:
                s.reward = value

    def get_reward_value(self, args: Any) -> Any:
        """The rollout's reward as slime's ``Sample.get_reward_value`` reads a sample's."""
        key = getattr(args, "reward_key", None)
        value = self.reward
        return value[key] if key and isinstance(value, dict) else value


def rollout_reward_value(item: Any, args: Any) -> Any:
    """A group item's reward: a :class:`Siblings` (or any list of one rollout's samples) counts
    once with its rollout's reward; a sample is read as slime reads it."""
    if isinstance(item, list) and not isinstance(item, Siblings):
        item = Siblings(item)
    if hasattr(item, "get_reward_value"):
        return item.get_reward_value(args)
    key = getattr(args, "reward_key", None)
    return item.reward[key] if key else item.reward
