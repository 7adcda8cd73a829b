"""Name -> lazily imported class, extendable by third parties through entry points."""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from coding_agent_rl.errors import UserError


class UnknownName(UserError, ValueError):
    """No entry of that name (the message lists the known ones and those that failed to load)."""


class MissingExtra(UserError, ImportError):
    """The entry needs an optional dependency (the message names the pip extra)."""


class Registry:
    """Maps a name to ``"module:Class"`` (and the pip extra it needs); imports on first use."""

    def __init__(
        self, kind: str, entry_point_group: str, builtins: dict[str, tuple[str, str | None]]
    ):
        self.kind = kind
        self.group = entry_point_group
        self._builtins = dict(builtins)

    def _entries(self) -> dict[str, tuple[str, str | None]]:
        entries = dict(self._builtins)
        try:
            for ep in metadata.entry_points(group=self.group):
                entries.setdefault(ep.name, (ep.value, None))
        except Exception:  # a broken third-party install must not hide the built-ins
            pass
        return entries

    def names(self) -> list[str]:
        return sorted(self._entries())

    def load(self, name: str) -> Any:
        entries = self._entries()
        if name not in entries:
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(entries))}")
        target, extra = entries[name]
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            if extra:
                raise MissingExtra(
                    f"{self.kind} {name!r} needs an optional dependency ({e.name}): "
                    f"pip install 'coding-agent-rl[{extra}]'"
                ) from e
            raise
        return getattr(module, attr)
