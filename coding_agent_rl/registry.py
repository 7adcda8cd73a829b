"""Name -> lazily imported object, extendable by third parties through entry points.

The registries: sandbox backends (``coding_agent_rl.sandbox.BACKENDS``), agent harnesses
(``coding_agent_rl.harness.HARNESSES``), native-loop environments
(``coding_agent_rl.env.ENVIRONMENTS``) and dataset converters
(``coding_agent_rl.datasets.convert.CONVERTERS``). A third-party package adds one with an entry
point in the registry's group (``name = "pkg.module:Object"``); nothing else changes. An entry
point that fails to load is never dropped silently: :meth:`Registry.failures` names it with its
error, ``coding-agent-rl --help`` lists it, and the error for an unknown name says so.
"""

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
    """Maps a name to ``"module:attr"`` (and the pip extra it needs); imports on first use."""

    def __init__(
        self, kind: str, entry_point_group: str, builtins: dict[str, tuple[str, str | None]]
    ):
        self.kind = kind
        self.group = entry_point_group
        self._builtins = dict(builtins)

    def _entry_points(self) -> tuple[dict[str, str], dict[str, str]]:
        """Third-party entries (name -> target) and the group's own failure, if any."""
        try:
            eps = metadata.entry_points(group=self.group)
        except Exception as e:  # a broken install must not hide the built-ins
            return {}, {f"<{self.group}>": f"{type(e).__name__}: {e}"}
        return {ep.name: ep.value for ep in eps}, {}

    def _entries(self) -> dict[str, tuple[str, str | None]]:
        entries = dict(self._builtins)
        for name, target in self._entry_points()[0].items():
            entries.setdefault(name, (target, None))
        return entries

    def names(self) -> list[str]:
        return sorted(self._entries())

    def failures(self) -> dict[str, str]:
        """Entry points (and the group itself) that cannot be loaded: name -> the error."""
        found, failed = self._entry_points()
        for name, target in found.items():
            if name in self._builtins:
                continue
            try:
                self._import(target)
            except Exception as e:
                failed[name] = f"{type(e).__name__}: {e}"
        return failed

    def describe_failures(self) -> str:
        """One line per entry that failed to load ('' when none)."""
        return "\n".join(
            f"{self.kind} {name!r} (entry point {self.group}) failed to load: {err}"
            for name, err in sorted(self.failures().items())
        )

    def load(self, name: str) -> Any:
        entries = self._entries()
        if name not in entries:
            known = ", ".join(sorted(entries))
            failed = "; ".join(f"{n}: {err}" for n, err in sorted(self.failures().items()))
            extra = f"; failed to load: {failed}" if failed else ""
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {known}{extra}")
        target, extra_name = entries[name]
        try:
            return self._import(target)
        except ImportError as e:
            if extra_name:
                raise MissingExtra(
                    f"{self.kind} {name!r} needs an optional dependency ({e.name}): "
                    f"pip install 'coding-agent-rl[{extra_name}]'"
                ) from e
            raise

    @staticmethod
    def _import(target: str) -> Any:
        module_name, _, attr = target.partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr) if attr else module
