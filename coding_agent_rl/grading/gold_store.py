"""Where fresh-input canaries derived at validation live until grading: one JSON file.

Entries are keyed by instance id + hash of the hidden test file's text (after the test patch) +
hash of the gold patch, so a changed test or gold patch never reuses a stale derivation.
Details: docs/modules/grading.md.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading.gold_canaries import Variant


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def store_key(instance_id: str, test_text: str, gold_patch: str) -> str:
    return f"{instance_id}:{_sha(test_text)}:{_sha(gold_patch)}"


@functools.lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int, size: int) -> dict[str, list[dict[str, Any]]]:
    """The parsed file, once per version (every grading sandbox reads it)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class GoldStore:
    """``path``: the JSON file (key -> list of variants); missing or unreadable: empty."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._data: dict[str, list[dict[str, Any]]] | None = None

    def _load(self) -> dict[str, list[dict[str, Any]]]:
        if self._data is None:
            try:
                st = self.path.stat()
                self._data = dict(_read(str(self.path), st.st_mtime_ns, st.st_size))
            except OSError:
                self._data = {}
        return self._data

    def put(
        self, instance_id: str, gold_patch: str, sources: dict[str, str], variants: list[Variant]
    ) -> None:
        """Record ``variants`` for ``sources`` (test file -> text); written atomically."""
        data = self._load()
        for path, text in sources.items():
            data[store_key(instance_id, text, gold_patch)] = [
                v.to_json() for v in variants if v.file == path
            ]
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def get(
        self, instance_id: str, gold_patch: str, sources: dict[str, str]
    ) -> list[Variant] | None:
        """The stored variants for these test texts, or None where any file has no entry."""
        data = self._load()
        out: list[Variant] = []
        for text in sources.values():
            entry = data.get(store_key(instance_id, text, gold_patch))
            if entry is None:
                return None
            try:
                out += [Variant.from_json(d) for d in entry]
            except (KeyError, TypeError, ValueError, SyntaxError):
                return None
        return out


STORE_NAME = "gold-canaries.json"


def default_store() -> GoldStore:
    """The store under the settings' cache root (``validate --derive-canaries`` writes it)."""
    from coding_agent_rl import settings

    return GoldStore(Path(settings.current().cache_root) / STORE_NAME)


def gold_of(row: TaskRow) -> str:
    """What the store keys the gold side on: the gold patch, else Harbor's solution script."""
    return row.patch or str(row.metadata.get("solution_script") or "")


def fresh_for(
    row: TaskRow, sources: dict[str, str], store: GoldStore | None = None
) -> list[Variant] | None:
    """The stored fresh-input variants for ``row`` with these test texts (None: none stored)."""
    if not sources or not gold_of(row):
        return None
    return (store or default_store()).get(row.instance_id, gold_of(row), sources)
