"""A harness's own variables (``settings.agent_vars``): extra CLI args and extra env, in slime's
formats, each error naming the variable."""

from __future__ import annotations

import json
import shlex
from typing import Any, TypeVar

from coding_agent_rl import settings
from coding_agent_rl.harness.context import HarnessConfigError

JsonT = TypeVar("JsonT", list[Any], dict[str, Any])


def json_env(name: str, kind: type[JsonT]) -> JsonT | None:
    """Parse the harness variable ``name`` (``settings.agent_vars``) as JSON of ``kind``; a bad
    value is an error naming the variable."""
    raw = settings.current().agent_var(name)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise HarnessConfigError(f"{name} is not valid JSON ({e}): {raw[:200]!r}") from None
    if not isinstance(value, kind):
        raise HarnessConfigError(f"{name} must be a JSON {kind.__name__}, got {raw[:200]!r}")
    return value


def args_from_env(name: str) -> list[str]:
    """Extra CLI args: a JSON list of strings, or shell words (slime's format)."""
    raw = (settings.current().agent_var(name) or "").strip()
    if raw.startswith("["):
        value = json_env(name, list)
        if not all(isinstance(a, str) for a in value or []):
            raise HarnessConfigError(f"{name} must be a JSON list of strings, got {raw[:200]!r}")
        return list(value or [])
    try:
        return shlex.split(raw)
    except ValueError as e:
        raise HarnessConfigError(f"{name} is not valid shell words ({e}): {raw[:200]!r}") from None


def env_from_env(name: str) -> dict[str, str]:
    """Extra env vars: a JSON object; values are turned into strings."""
    value = json_env(name, dict) or {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
