"""slime's own code in the tests: the vendored source (``shared/vendor/slime``, unmodified) on
``sys.path``, run with the real torch, ray, transformers, httpx and aiohttp.

Only modules that the rollout-side paths import but never execute are stubbed (:data:`STUBS`):
SGLang and its router (the GPU engine; our CPU policy server speaks its HTTP API instead),
Megatron (training), wandb (logging), pylatexenc (slime's math reward model) and pybase64.
Each stub holds only the names slime imports from it; calling into one raises.

Where the vendored tree is (:func:`slime_src`, the one place that looks): ``$CODING_AGENT_RL_SLIME_SRC``
when set, else ``../shared/vendor/slime`` beside the checkout. Its ``VENDORED.md`` must name
:data:`EXPECTED_COMMIT`. When it is absent, :func:`slime` skips the test or module that asks
(one summary line, ``tests/conftest.py``), and under ``CI=true`` that skip is a failure.

Use :func:`slime` (imports and returns the module namespace the tests drive),
:func:`fresh_state` (slime's per-process ``GenerateState`` is a singleton), :func:`trainer`
(slime's ``RolloutManager`` conversion methods without starting engines).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BESIDE = REPO.parent / "shared" / "vendor" / "slime"
EXPECTED_COMMIT = "624b824a8"  # the commit VENDORED.md records (github.com/THUDM/slime)
MISSING: list[str] = []  # why slime's source was not found, once asked (the summary line)


class SlimeNotFound(RuntimeError):
    """No vendored slime tree where :func:`slime_src` looks."""


def slime_src() -> Path:
    """The vendored slime tree (a folder holding the ``slime`` package) at the expected commit."""
    env = os.environ.get("CODING_AGENT_RL_SLIME_SRC")
    where = Path(env) if env else BESIDE
    origin = "CODING_AGENT_RL_SLIME_SRC" if env else "../shared/vendor/slime beside the checkout"
    if not (where / "slime" / "rollout" / "sglang_rollout.py").is_file():
        raise SlimeNotFound(
            f"slime's vendored source not found at {where} ({origin}); "
            "set CODING_AGENT_RL_SLIME_SRC to a copy of github.com/THUDM/slime "
            f"at commit {EXPECTED_COMMIT}"
        )
    record = where / "VENDORED.md"
    text = record.read_text() if record.is_file() else ""
    found = re.search(r"at commit ([0-9a-f]{7,40})", text)
    if found is None or not (
        found.group(1).startswith(EXPECTED_COMMIT) or EXPECTED_COMMIT.startswith(found.group(1))
    ):
        got = found.group(1) if found else "no commit recorded"
        raise RuntimeError(
            f"{record}: vendored slime is at {got}, the tests expect commit {EXPECTED_COMMIT}"
        )
    return where


def src_or_skip() -> Path:
    """:func:`slime_src`, or a skip of the asking test/module naming what is missing."""
    try:
        return slime_src()
    except SlimeNotFound as e:
        if not MISSING:
            MISSING.append(str(e))
        import pytest

        pytest.skip(f"SKIPPED (no slime source): {e}", allow_module_level=True)
        raise  # unreachable: pytest.skip raises


def _unused(name: str) -> Any:
    """A stand-in for a name these paths import but never call."""

    class Unused:
        def __init__(self, *a: Any, **k: Any):
            raise RuntimeError(f"stub {name} called: not available in the tests")

        @staticmethod
        def add_cli_args(parser: Any, *a: Any, **k: Any) -> Any:  # sglang/router flags: none
            return parser

    Unused.__name__ = Unused.__qualname__ = name.rsplit(".", 1)[-1]
    return Unused


# module -> names slime imports from it (never executed on the paths the tests drive)
STUBS: dict[str, tuple[str, ...]] = {
    "sglang": (),
    "sglang.srt": (),
    "sglang.srt.constants": (
        "GPU_MEMORY_TYPE_CUDA_GRAPH",
        "GPU_MEMORY_TYPE_KV_CACHE",
        "GPU_MEMORY_TYPE_WEIGHTS",
    ),
    "sglang.srt.server_args": ("ServerArgs",),
    "sglang.srt.utils": ("kill_process_tree",),
    "sglang_router": (),
    "sglang_router.launch_router": ("RouterArgs", "launch_router"),
    "megatron": (),
    "megatron.core": (),
    "megatron.core.dist_checkpointing": (),
    "megatron.core.dist_checkpointing.strategies": (),
    "megatron.core.dist_checkpointing.strategies.filesystem_async": ("FileSystemWriterAsync",),
    "wandb": ("init", "log", "finish", "define_metric"),
    "pylatexenc": (),
    "pylatexenc.latex2text": ("LatexNodes2Text",),
    "pybase64": ("b64decode",),
}


def _install_stubs() -> None:
    for name, attrs in STUBS.items():
        try:
            importlib.import_module(name)
            continue  # the real package is installed: use it
        except ImportError:
            pass
        mod = types.ModuleType(name)
        mod.__doc__ = "stub for the tests (tests/support/slime_vendor.py): never executed"
        mod.__path__ = []  # a package, so submodules resolve from sys.modules
        for attr in attrs:
            if attr.isupper():
                setattr(mod, attr, attr.lower())
            else:
                setattr(mod, attr, _unused(f"{name}.{attr}"))
        sys.modules[name] = mod
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, mod)


@functools.cache
def slime() -> types.SimpleNamespace:
    """slime's modules the tests drive (imported once per process)."""
    src = str(src_or_skip())
    if src not in sys.path:
        sys.path.insert(0, src)
    _install_stubs()
    from slime.ray import rollout as ray_rollout
    from slime.rollout import data_source, fully_async_rollout, rm_hub, sglang_rollout
    from slime.rollout.filter_hub import dynamic_sampling_filters
    from slime.utils import arguments, http_utils, misc
    from slime.utils import types as slime_types

    return types.SimpleNamespace(
        src=Path(src),
        Sample=slime_types.Sample,
        sglang_rollout=sglang_rollout,
        rm_hub=rm_hub,
        ray_rollout=ray_rollout,
        fully_async=fully_async_rollout,
        data_source=data_source,
        filters=dynamic_sampling_filters,
        arguments=arguments,
        http_utils=http_utils,
        misc=misc,
    )


def fresh_state(args: Any, state_checkpoint: str | None = None) -> Any:
    """slime's ``GenerateState`` for ``args`` (a singleton per process: the previous one is
    dropped), with slime's HTTP client ready for its abort (``/workers``, ``/abort_request``).
    ``state_checkpoint``: the checkpoint the state loads its tokenizer / processor from, when not
    ``args.hf_checkpoint`` (a VLM's video processor needs torchvision, not installed here)."""
    s = slime()
    s.misc.SingletonMeta._instances.pop(s.sglang_rollout.GenerateState, None)
    if getattr(args, "rollout_num_engines", None) is None:
        args.rollout_num_engines = 1
    s.http_utils._http_client = None
    s.http_utils.init_http_client(args)
    # Tests run each in an event loop of its own, and the client is a process global no test
    # closes: with keep-alive on, its pooled connections outlive their loop (leaked sockets).
    # slime's own client, then, with connections closed after each response.
    import httpx

    s.http_utils._http_client = httpx.AsyncClient(
        limits=httpx.Limits(
            max_connections=s.http_utils._client_concurrency, max_keepalive_connections=0
        ),
        timeout=httpx.Timeout(None),
    )
    if state_checkpoint is None:
        return s.sglang_rollout.GenerateState(args)
    return s.sglang_rollout.GenerateState(
        types.SimpleNamespace(**{**vars(args), "hf_checkpoint": state_checkpoint})
    )


def trainer(args: Any) -> Any:
    """slime's ``RolloutManager`` with only what its conversion into train data reads
    (``args``, the reward post-process and conversion hooks); no engines, no Ray actors."""
    s = slime()
    cls = s.ray_rollout.RolloutManager.__ray_actor_class__  # the class under @ray.remote
    manager = cls.__new__(cls)
    manager.args = args
    post = getattr(args, "custom_reward_post_process_path", None)
    conv = getattr(args, "custom_convert_samples_to_train_data_path", None)
    manager.custom_reward_post_process_func = s.misc.load_function(post) if post else None
    manager.custom_convert_samples_to_train_data_func = s.misc.load_function(conv) if conv else None
    return manager


def slime_args(**fields: Any) -> types.SimpleNamespace:
    """slime's ``args`` with the defaults of its own parser for every rollout-side flag, then
    ``fields`` (the test's launch flags, by attribute name)."""
    import argparse

    s = slime()
    parser = argparse.ArgumentParser(allow_abbrev=False)
    s.arguments.get_slime_extra_args_provider()(parser)
    defaults = {}
    for action in parser._actions:
        if action.dest == "help":
            continue
        value = action.default
        if isinstance(value, str) and callable(action.type) and action.type is not str:
            value = action.type(value)  # argparse converts string defaults the same way
        defaults[action.dest] = value
    # sglang's own flags (the engine is not installed): the ones these paths read
    defaults.update(
        sglang_router_ip=None,
        sglang_router_port=None,
        sglang_server_concurrency=512,
        sglang_dp_size=None,
        sglang_enable_deterministic_inference=False,
        router_policy=None,
        rollout_num_engines=1,
    )
    argv, sys.argv = sys.argv, sys.argv[:1]  # slime pre-parses its mode flags from the CLI
    try:
        defaults.update(vars(s.arguments._pre_parse_mode()))
    finally:
        sys.argv = argv
    defaults.update(fields)
    return types.SimpleNamespace(**defaults)
