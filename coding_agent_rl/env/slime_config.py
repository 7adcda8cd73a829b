"""The native loop's settings as slime gives them: ``--custom-config-path`` YAML keys
(``rollout_interaction_env_path``, ``max_turns``, ``max_env_retries_per_turn``,
``env_retry_backoff_s``, ``env_step_timeout_s``; slime copies them onto ``args``, else the file is
read here), and the environment module they name (a registered name, a dotted module or a
``.py`` file exposing ``build_env(sample=..., args=...)``)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import pathlib
import sys
from typing import Any

from coding_agent_rl.env.episode import LoopConfig

log = logging.getLogger(__name__)
CONFIG_KEYS = ("max_env_retries_per_turn", "env_retry_backoff_s", "env_step_timeout_s")


def custom_config(args: Any) -> dict[str, Any]:
    """The YAML at ``args.custom_config_path`` (empty when there is none)."""
    path = getattr(args, "custom_config_path", None)
    if not path:
        return {}
    import yaml

    data = yaml.safe_load(pathlib.Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the custom config must be a YAML mapping")
    return data


def setting(args: Any, custom: dict[str, Any], name: str, default: Any = None) -> Any:
    value = getattr(args, name, None)
    return value if value is not None else custom.get(name, default)


def loop_config_from_args(args: Any) -> tuple[str, LoopConfig]:
    """The environment module and the loop's budgets, as slime's args give them."""
    custom = custom_config(args)
    env_path = setting(args, custom, "rollout_interaction_env_path")
    max_turns = setting(args, custom, "max_turns")
    if not env_path:
        raise ValueError(
            "rollout_interaction_env_path is not set (a key of the --custom-config-path YAML)"
        )
    if max_turns is None:
        raise ValueError("max_turns must be set in the --custom-config-path YAML")
    extra = {k: setting(args, custom, k) for k in CONFIG_KEYS}
    config = LoopConfig(
        max_turns=int(max_turns),
        max_context=getattr(args, "rollout_max_context_len", None),
        max_response=getattr(args, "rollout_max_response_len", None),
        **{k: v for k, v in extra.items() if v is not None},
    )
    return str(env_path), config


@functools.lru_cache(maxsize=16)
def load_env_module(target: str) -> Any:
    """A registered environment (:data:`ENVIRONMENTS`), a module by dotted name, or a ``.py``
    file by path."""
    from coding_agent_rl.env import ENVIRONMENTS

    path = pathlib.Path(target)
    if target in ENVIRONMENTS.names():
        module = ENVIRONMENTS.load(target)
    elif path.suffix == ".py":
        if not path.is_file():
            raise ValueError(f"environment module {target}: no such file")
        name = f"coding_agent_rl_env_{path.stem}_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"environment module {target}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    if not getattr(module, "PIPELINE_AGENT", None) and not callable(
        getattr(module, "build_env", None)
    ):
        raise ValueError(f"environment module {target} has no build_env(sample=..., args=...)")
    return module


def build_env(module: Any, sample: Any, args: Any) -> Any:
    """``module.build_env(sample=..., args=...)``; a positional ``build_env(sample, args)`` too
    (slime falls back to that on ``TypeError``)."""
    try:
        return module.build_env(sample=sample, args=args)
    except TypeError as keyword_error:
        try:
            return module.build_env(sample, args)
        except TypeError:
            raise keyword_error from None
