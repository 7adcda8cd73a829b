"""slime's entry point for the native loop with any environment module.

``--custom-generate-function-path coding_agent_rl.env.generate.generate`` and
``--custom-config-path CONFIG.yaml``, whose keys (not flags: slime's parser has no such flags)
are ``rollout_interaction_env_path`` (a registered name, a dotted module or a ``.py`` file
exposing ``build_env(sample=..., args=...)``, or positionally ``build_env(sample, args)``;
``coding_agent_rl.env.coding`` is our coding env), ``max_turns``, optionally
``max_env_retries_per_turn``, ``env_retry_backoff_s``, ``env_step_timeout_s``. slime copies the
YAML's keys onto ``args``; when it has not, the file is read here.

Once per process: the tokenizer (``args.hf_checkpoint``; ``args.apply_chat_template_kwargs`` go
to the template; a VLM checkpoint's image processor turns observation images into image tokens,
``image_data`` and the sample's ``multimodal_*`` fields) and a client for SGLang at ``args.sglang_router_ip:port``. Budgets:
``args.rollout_max_context_len`` and ``args.rollout_max_response_len``. The routing key is
``sample.session_id`` (slime sets one per sample). Never raises for a per-sample failure: it
returns slime's aborted placeholder (``remove_sample=True``, ``metadata.abort_reason``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import importlib.util
import logging
import pathlib
import sys
import uuid
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.env.base import call
from coding_agent_rl.env.episode import ABORTED, LoopConfig
from coding_agent_rl.env.loop import run_episode
from coding_agent_rl.env.sample import abort_sample, fill_sample
from coding_agent_rl.errors import RolloutAborted
from coding_agent_rl.trainer_abort import slime_abort_flag, until_stopped

log = logging.getLogger(__name__)
CONFIG_KEYS = ("max_env_retries_per_turn", "env_retry_backoff_s", "env_step_timeout_s")

_states: dict[tuple[str, str], Any] = {}
_lock: asyncio.Lock | None = None


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
    if not callable(getattr(module, "build_env", None)):
        raise ValueError(f"environment module {target} has no build_env(sample=..., args=...)")
    return module


class _State:
    """Per process: the settings (read once, installed for the process), the encoder and the
    SGLang client."""

    def __init__(self, args: Any):
        from coding_agent_rl.env.encoding import ChatEncoder
        from coding_agent_rl.model.sglang import SGLangClient
        from coding_agent_rl.multimodal.processor import VisionProcessor, has_image_processor
        from coding_agent_rl.tokenizer import load_tokenizer

        self.settings = settings.load()
        settings.install(self.settings)
        checkpoint = getattr(args, "hf_checkpoint", None)
        self.tokenizer = load_tokenizer(checkpoint or "qwen3")
        kwargs = getattr(args, "apply_chat_template_kwargs", None) or None
        # A VLM checkpoint (it has an image processor): observations' images become image tokens.
        vision = (
            VisionProcessor.load(checkpoint, self.tokenizer)
            if checkpoint and has_image_processor(checkpoint)
            else None
        )
        self.encoder = ChatEncoder(self.tokenizer, template_kwargs=kwargs, vision=vision)
        host = getattr(args, "sglang_router_ip", None) or "127.0.0.1"
        self.client = SGLangClient(f"http://{host}:{getattr(args, 'sglang_router_port', None)}")

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


async def _state(args: Any) -> _State:
    global _lock
    key = (
        str(getattr(args, "hf_checkpoint", None)),
        f"{getattr(args, 'sglang_router_ip', None)}:{getattr(args, 'sglang_router_port', None)}",
    )
    if key not in _states:
        _lock = _lock or asyncio.Lock()
        async with _lock:
            if key not in _states:
                _states[key] = await asyncio.to_thread(_State, args)
    return _states[key]


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


async def generate(
    args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False
) -> Any:
    """One episode of ``sample`` through the native loop; returns the filled ``sample``."""
    if getattr(sample, "rollout_id", None) is None and hasattr(sample, "rollout_id"):
        sample.rollout_id = sample.index
    try:
        env_path, config = loop_config_from_args(args)
        module = load_env_module(env_path)
        state = await _state(args)
    except Exception as e:  # misconfiguration: every sample says why, the batch goes on
        log.error("native loop: %s", e)
        return abort_sample(sample, f"native loop setup: {type(e).__name__}: {e}", "infra")
    try:
        env = build_env(module, sample, args)
    except Exception as e:
        return abort_sample(sample, f"build_env: {type(e).__name__}: {e}", "data")
    metadata = sample.metadata or {}
    stop = slime_abort_flag(args)  # slime's end-of-step abort, polled through the episode
    try:
        episode = await until_stopped(
            run_episode(
                env,
                engine=state.client,
                encoder=state.encoder,
                sampling_params=sampling_params,
                config=config,
                routing_key=getattr(sample, "session_id", None) or f"native-{uuid.uuid4().hex}",
                prompt=sample.prompt,
                tools=metadata.get("tools"),
            ),
            stop,
        )
        if episode.status == ABORTED:
            return abort_sample(
                sample, episode.reason or episode.end, episode.failure_kind or "infra"
            )
        outcome = (
            await until_stopped(call(env.evaluate), stop) if hasattr(env, "evaluate") else None
        )
        if outcome is not None and outcome.failure_kind == "infra":
            return abort_sample(sample, f"evaluate: {outcome.reason}", "infra")
        reward = outcome.reward if outcome is not None else None
        extra: dict[str, Any] = {}
        if outcome is not None:
            extra = {"failure_kind": outcome.failure_kind, "rollout_reward": reward}
            if outcome.reason and (reward or 0.0) < 1.0:
                extra["fail_reason"] = outcome.reason
        return fill_sample(sample, episode, decode=state.decode, reward=reward, metadata=extra)
    except RolloutAborted as e:  # the trainer ended the step: the episode was cancelled
        return abort_sample(sample, str(e), "aborted")
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a bug must cost one sample, not the batch
        log.exception("native episode of sample %s crashed", getattr(sample, "index", "?"))
        return abort_sample(sample, f"internal error: {type(e).__name__}: {e}", "infra")
    finally:
        with contextlib.suppress(Exception):
            await call(env.close)
