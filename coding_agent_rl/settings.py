"""Every knob read from the environment, in one typed, frozen object.

Each field has one primary variable under the ``CODING_AGENT_RL_`` prefix; where slime's
coding-agent example (or Docker / E2B) already named the knob, that name is an accepted alias
(``SWE_AGENT_TIME_BUDGET_SEC``, ``ADAPTER_PUBLIC_HOST``, ``SLIME_AGENT_CC_EXTRA_ARGS``, ...).
The table in ``docs/settings.md`` is generated from this class (:func:`markdown_table`; a test
keeps it current).

The environment is read once, at the entry points (``cli.main``, ``generate``,
``generate_native``), which :func:`install` the result for their process; everything below them
takes a :class:`Settings` argument or asks :func:`current`. Nothing else reads ``os.environ``
(``tests/test_settings.py`` scans the package). A :class:`Settings` is plain data: a Ray
worker receives ``settings.model_dump(mode="json")`` and rebuilds it with
``Settings.model_validate``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from coding_agent_rl.errors import UserError

PREFIX = "CODING_AGENT_RL_"
DEFAULT_CACHE = "~/.cache/coding-agent-rl"
DEFAULT_DISK_DIR = "/var/lib/coding-agent-rl/disks"
# A harness's own variables (extra args / env, a local tarball): named by the harness class
# (``BaseHarness.extra_args_env`` ...) with one of these suffixes, so a new harness needs no
# field here.
AGENT_VAR = re.compile(r"^[A-Z][A-Z0-9_]*_(EXTRA_ARGS|EXTRA_ENVS|TARBALL)$")


def _env(name: str, *aliases: str) -> Any:
    """``validation_alias`` for a field read from ``CODING_AGENT_RL_<NAME>`` or ``aliases``."""
    return AliasChoices(PREFIX + name, *aliases)


class _AgentVars(PydanticBaseSettingsSource):
    """Collects the harnesses' variables (:data:`AGENT_VAR`) into ``agent_vars``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found = {k: v for k, v in os.environ.items() if AGENT_VAR.match(k)}
        return {"agent_vars": found} if found else {}


class Settings(BaseSettings):
    """The process's settings. Construct with keyword arguments (tests, Ray workers) or
    :func:`load` from the environment."""

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, use_attribute_docstrings=True
    )

    # ---- where things live -----------------------------------------------------------------
    cache_root: pathlib.Path = Field(pathlib.Path(DEFAULT_CACHE), validation_alias=_env("CACHE"))
    """Host cache: agent CLI tarballs, the tokenizer, local root filesystems, repositories."""
    disk_dir: pathlib.Path = Field(
        pathlib.Path(DEFAULT_DISK_DIR), validation_alias=_env("DISK_DIR")
    )
    """Where capped sandbox disks (loop-mounted files) are kept on the host."""
    dataset_dir: pathlib.Path | None = Field(None, validation_alias=_env("DATASET_DIR"))
    """Base for a row's relative paths when it comes from slime (no dataset file); default cwd."""
    out_dir: pathlib.Path | None = Field(None, validation_alias=_env("OUT_DIR"))
    """``generate``: also write results.jsonl, metrics.prom and per-rollout artifacts here."""

    # ---- the rollout (slime's generate) ----------------------------------------------------
    agent: str = Field("claude_code", validation_alias=_env("AGENT", "SWE_AGENT"))
    """Harness name (``coding-agent-rl run --help`` lists them) or ``native``."""
    sandbox: str = Field("docker", validation_alias=_env("SANDBOX"))
    """Sandbox backend name (docker | local | e2b | an entry point)."""
    sandbox_options: Annotated[dict[str, Any], NoDecode] = Field(
        {}, validation_alias=_env("SANDBOX_OPTIONS")
    )
    """Backend options as a JSON object, e.g. ``{"memory": "8g", "pids": 2048}``."""
    agent_network: str | None = Field(None, validation_alias=_env("AGENT_NETWORK"))
    """What the agent sandbox reaches: adapter-only (default) | open | none."""
    agent_budget_s: float = Field(
        1800.0, validation_alias=_env("AGENT_BUDGET_S", "SWE_AGENT_TIME_BUDGET_SEC")
    )
    """Wall-clock budget of the agent CLI, seconds."""
    eval_timeout_s: float = Field(
        600.0, validation_alias=_env("EVAL_TIMEOUT_S", "SWE_EVAL_TIMEOUT_SEC")
    )
    """Time limit of the hidden tests, seconds."""
    rollout_deadline_s: float | None = Field(
        None, validation_alias=_env("ROLLOUT_DEADLINE_S", "SWE_ROLLOUT_DEADLINE_SEC")
    )
    """Whole-rollout guard, seconds; unset or 0: agent budget + 2 x eval timeout + 600."""
    resume_attempts: int = Field(2, ge=1, validation_alias=_env("RESUME_ATTEMPTS"))
    """``run --resume``: attempts per rollout in all (records in results.jsonl) before a rollout
    whose latest record is an infrastructure failure is left as it is."""
    reward_mode: Literal["full", "split"] = Field("full", validation_alias=_env("REWARD_MODE"))
    """full (every segment gets the reward) | split (reward / K)."""
    tamper_policy: Literal["zero", "flag"] = Field("zero", validation_alias=_env("TAMPER_POLICY"))
    """What a static tamper-screen finding does: zero (scores 0) | flag (recorded only)."""
    twin_grade: bool = Field(False, validation_alias=_env("TWIN_GRADE"))
    """Grade every diff twice, in fresh sandboxes with independent blinding and canaries; hidden-test
    outcomes that disagree are tampering (doubles grading sandboxes; recommended for evaluation)."""
    tamper_reward: float = Field(0.0, validation_alias=_env("TAMPER_REWARD"))
    """The reward of a result with tampering evidence; -1 makes forging lose in expectation."""
    model_name: str = Field("policy", validation_alias=_env("MODEL_NAME"))
    """The model name the agent CLI is told to use (passed verbatim)."""
    prompt_template: str | None = Field(None, validation_alias=_env("PROMPT", "SWE_CC_PROMPT"))
    """The agent's prompt template (``{problem_statement}``, ``{workdir}``)."""
    tokenizer: str = Field("qwen3", validation_alias=_env("TOKENIZER"))
    """``run``: the policy's tokenizer, an HF tokenizer directory or ``qwen3`` (built offline);
    slime's path uses its ``hf_checkpoint``."""
    tool_parser: str = Field("qwen25", validation_alias=_env("TOOL_PARSER"))
    """How tool calls are parsed from the policy's text: qwen25 | hermes | qwen3_coder (slime's
    ``sglang_tool_call_parser`` wins on its path)."""
    reasoning_parser: str | None = Field("qwen3", validation_alias=_env("REASONING_PARSER"))
    """How reasoning is split from the policy's text: qwen3 | none (slime's path uses its
    ``sglang_reasoning_parser``)."""
    tree_rollouts: bool = Field(False, validation_alias=_env("TREE_ROLLOUTS"))
    """``generate()``: each group of n samples is one tree, a root and n - 1 branches replaying
    its first turns (agent CLIs, in-process executor; rollout/branch.py)."""
    tree_branch_at: int | None = Field(None, ge=1, validation_alias=_env("TREE_BRANCH_AT"))
    """With tree rollouts: branch at this turn; unset: at the turns where the policy was least
    sure (mean negative logprob of the sampled tokens)."""

    # ---- the adapter -----------------------------------------------------------------------
    adapter_port: int | None = Field(None, validation_alias=_env("ADAPTER_PORT", "ADAPTER_PORT"))
    """The adapter's port; unset or 0: an ephemeral port."""
    adapter_bind_host: str | None = Field(
        None, validation_alias=_env("ADAPTER_BIND_HOST", "ADAPTER_BIND_HOST")
    )
    """Where the adapter listens; default per backend (``Sandbox.adapter_bind_host``)."""
    adapter_public_host: str | None = Field(
        None, validation_alias=_env("ADAPTER_PUBLIC_HOST", "ADAPTER_PUBLIC_HOST")
    )
    """The adapter's host as sandboxes see it; needed for remote backends (E2B)."""
    adapter_processes: int = Field(1, ge=1, validation_alias=_env("ADAPTER_PROCESSES"))
    """Adapter processes per node (one event loop each; each session is served by one of them,
    its sandbox pointed at that process's port). 1: the adapter runs in the rollout's process."""

    # ---- where rollouts run (rollout/executor.py) -------------------------------------------
    executor: str = Field("in-process", validation_alias=_env("EXECUTOR"))
    """in-process (this process's runtime) | ray (a worker per node of a Ray cluster that
    advertises ``coding_agent_rl_slots``)."""
    ray_address: str | None = Field(None, validation_alias=_env("RAY_ADDRESS", "RAY_ADDRESS"))
    """The Ray cluster (``HOST:PORT`` or ``auto``); default: the Ray already initialised in this
    process (slime's), else ``auto``."""
    ray_artifact_budget: int = Field(1 << 20, ge=0, validation_alias=_env("RAY_ARTIFACT_BUDGET"))
    """Bytes of per-rollout artifacts (diff, agent log, test log) a Ray worker ships back to the
    driver; a file past the budget keeps its tail and is listed in ``artifacts_truncated``."""
    ray_artifact_dir: pathlib.Path | None = Field(None, validation_alias=_env("RAY_ARTIFACT_DIR"))
    """A path every node sees (a shared file system): Ray workers write artifacts there instead
    of shipping them back."""

    # ---- sandbox backends ------------------------------------------------------------------
    boot_concurrency: int = Field(
        16, ge=1, validation_alias=_env("BOOT_CONCURRENCY", "SWE_BOOT_CONCURRENCY")
    )
    """Sandboxes created at once per backend (engine / provider rate)."""
    admission_jitter_s: float = Field(0.2, ge=0, validation_alias=_env("ADMISSION_JITTER_S"))
    """A creation that starts while others are in flight first waits a random time below this
    (seconds): a burst does not reach the engine in lockstep. 0: no jitter."""
    create_timeout_s: float = Field(180.0, ge=0, validation_alias=_env("CREATE_TIMEOUT_S"))
    """One attempt at creating a sandbox longer than this (seconds) is destroyed, counted and
    retried with backoff; 0: no timeout."""
    create_timeout_attempts: int = Field(3, ge=1, validation_alias=_env("CREATE_TIMEOUT_ATTEMPTS"))
    """Attempts in all at creating one sandbox when they time out (``create_timeout_s``)."""
    pool_size: int | None = Field(None, ge=0, validation_alias=_env("POOL_SIZE"))
    """Prepared agent sandboxes kept ready per runtime (docs/sandbox-pool.md): fresh, never
    used, no session key until claimed. Unset: ``run`` keeps one per rollout slot (its
    concurrency in process, each node's slots on Ray), slime's entry none (a group's samples are
    claimed at once; ``fork_groups`` is what helps there). 0: none."""
    pool_idle_s: float = Field(600.0, ge=0, validation_alias=_env("POOL_IDLE_S"))
    """A pooled sandbox unclaimed this long (seconds) is destroyed and its expected claim
    dropped (that claim, if it comes, prepares on demand); 0: no limit."""
    fork_groups: bool = Field(False, validation_alias=_env("FORK_GROUPS"))
    """Prepare a task once per group of samples and copy the prepared sandbox for each sample
    (backends with snapshots: docker, local, e2b); off: every sample prepares its own."""
    reap_interval_s: float = Field(300.0, ge=0, validation_alias=_env("REAP_INTERVAL_S"))
    """How often a running runtime removes sandboxes whose owner process died (it also does at
    every start), seconds; 0: only at start."""
    docker_host: str | None = Field(None, validation_alias=AliasChoices("DOCKER_HOST"))
    """Docker's own variable: an engine elsewhere (tcp://, ssh://) cannot bind host files."""
    e2b_template: str | None = Field(
        None, validation_alias=_env("E2B_TEMPLATE", "SLIME_AGENT_E2B_TEMPLATE")
    )
    """E2B template for every sandbox (else the image name, or the metadata key's value)."""
    e2b_metadata_key: str | None = Field(
        None,
        validation_alias=_env("E2B_METADATA_KEY", "SLIME_AGENT_SANDBOX_IMAGE_METADATA_KEY"),
    )
    """Row metadata key naming the E2B template per task (slime's convention)."""
    e2b_lifetime_s: int = Field(3600, ge=1, validation_alias=_env("E2B_LIFETIME_S"))
    """E2B sandbox time-to-live (the SDK's ``timeout`` at create), seconds: a dead run's
    sandboxes expire by it. At most ``e2b_max_lifetime_s``; keep it at or above the rollout
    deadline (default 3600 s)."""
    e2b_max_lifetime_s: int = Field(3600, ge=1, validation_alias=_env("E2B_MAX_LIFETIME_S"))
    """The longest sandbox lifetime your E2B plan allows, seconds (Hobby/Base: 3600, Pro:
    86400); a longer ``e2b_lifetime_s`` is refused at start (and by every e2b sandbox)."""
    e2b_adapter_dns: bool = Field(False, validation_alias=_env("E2B_ADAPTER_DNS"))
    """``adapter-only`` on E2B with ``ADAPTER_PUBLIC_HOST`` a host name: keep the name and let
    E2B open its public DNS resolver (8.8.8.8) to the sandbox. Default: the name is resolved
    on this host and the sandbox dials the IP with no DNS server reachable."""

    # ---- agent CLIs ------------------------------------------------------------------------
    agent_vars: dict[str, str] = Field({}, validation_alias=AliasChoices("agent_vars"))
    """Per-harness variables, named by each harness with the suffix ``_EXTRA_ARGS``,
    ``_EXTRA_ENVS`` or ``_TARBALL`` (``SLIME_AGENT_CC_EXTRA_ARGS``,
    ``SLIME_AGENT_CC_EXTRA_ENVS``, ``SLIME_AGENT_CC_TARBALL``, ``SLIME_AGENT_CODEX_*``,
    ``SLIME_AGENT_OPENCODE_*``, ``SLIME_AGENT_GEMINI_*``, ``SLIME_AGENT_QWEN_*``,
    ``SLIME_AGENT_NODE_TARBALL``): extra CLI args (JSON list or shell words), extra env (JSON
    object), a local tarball instead of the pinned download."""

    @field_validator("sandbox_options", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            parsed = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e}): {value[:200]!r}") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"must be a JSON object, got {value[:200]!r}")
        return parsed

    @field_validator(
        "cache_root", "disk_dir", "dataset_dir", "out_dir", "ray_artifact_dir", mode="after"
    )
    @classmethod
    def _expand(cls, value: pathlib.Path | None) -> pathlib.Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("e2b_max_lifetime_s", mode="after")
    @classmethod
    def _lifetime_within_plan(cls, value: int, info: ValidationInfo) -> int:
        lifetime = info.data.get("e2b_lifetime_s")
        if info.data.get("sandbox") == "e2b" and lifetime is not None and lifetime > value:
            raise ValueError(
                f"the E2B sandbox lifetime CODING_AGENT_RL_E2B_LIFETIME_S={lifetime} s exceeds "
                f"the plan's maximum CODING_AGENT_RL_E2B_MAX_LIFETIME_S={value} s: lower the "
                "lifetime, or set the maximum to your E2B plan's (Pro: 86400)"
            )
        return value

    @field_validator("rollout_deadline_s", "adapter_port", mode="after")
    @classmethod
    def _zero_is_unset(cls, value: float | None) -> float | None:
        return value or None

    @field_validator(
        "agent_network",
        "adapter_bind_host",
        "adapter_public_host",
        "prompt_template",
        "e2b_template",
        "e2b_metadata_key",
        "docker_host",
        "ray_address",
        mode="after",
    )
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("reasoning_parser", mode="after")
    @classmethod
    def _none_is_unset(cls, value: str | None) -> str | None:
        value = value.strip() if value is not None else None
        return None if value in (None, "", "none") else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment; no dotenv or secret files."""
        return init_settings, EnvSettingsSource(settings_cls), _AgentVars(settings_cls)

    def agent_var(self, name: str | None) -> str | None:
        """A harness's variable (``SLIME_AGENT_CC_EXTRA_ARGS`` ...), or None."""
        return self.agent_vars.get(name) if name else None

    @property
    def agents_dir(self) -> pathlib.Path:
        return self.cache_root / "agents"


def _one_line(e: ValidationError | SettingsError) -> str:
    if isinstance(e, ValidationError):
        first = e.errors()[0]
        where = str(first["loc"][0]) if first["loc"] else "?"
        for name, info in Settings.model_fields.items():
            names = _env_names(name, info)
            if where in (name, *names):
                where = " / ".join(names) if where != name else name
                break
        msg = str(first["msg"]).removeprefix("Value error, ")
        got = first.get("input")
        shown = f" (got {got!r:.200})" if isinstance(got, str) and "got" not in msg else ""
        return f"{where}: {msg}{shown}"
    return f"settings: {e}"


def load(**overrides: Any) -> Settings:
    """Read the environment (``overrides`` win); a bad value is a :class:`UserError` naming
    the variable."""
    try:
        return Settings(**overrides)
    except (ValidationError, SettingsError) as e:
        raise UserError(_one_line(e)) from None


def default(name: str) -> Any:
    """A setting's default: what a component's config field defaults to, so that each default
    is written once (here)."""
    info = Settings.model_fields[name]
    return info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]


_installed: Settings | None = None


def install(settings: Settings | None) -> Settings | None:
    """Make ``settings`` this process's (an entry point's first act); returns the previous."""
    global _installed
    previous, _installed = _installed, settings
    return previous


@contextlib.contextmanager
def using(settings: Settings) -> Iterator[Settings]:
    """:func:`install` ``settings`` for a block (tests, a CLI command)."""
    previous = install(settings)
    try:
        yield settings
    finally:
        install(previous)


def current() -> Settings:
    """The installed settings; without an entry point (a library caller, a test), the
    environment as it is now."""
    return _installed if _installed is not None else load()


def _env_names(name: str, info: FieldInfo) -> list[str]:
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names = [str(c) for c in alias.choices if isinstance(c, str) and c != name]
        return list(dict.fromkeys(names))
    return [str(alias)] if alias else [name]


def markdown_table() -> str:
    """The settings as a Markdown table (``docs/settings.md``)."""
    lines = [
        "# Settings",
        "",
        "Generated from `coding_agent_rl/settings.py` (`python -m coding_agent_rl.settings`);",
        "a test fails when it is stale. The first name is ours; the others are accepted aliases",
        "(slime's coding-agent example, Docker, E2B).",
        "",
        "| setting | environment | default | what |",
        "|---|---|---|---|",
    ]
    for name, info in Settings.model_fields.items():
        envs = (
            "see *what*"
            if name == "agent_vars"
            else ", ".join(f"`{n}`" for n in _env_names(name, info))
        )
        default = "" if info.default in (None, {}) else f"`{info.default}`"
        doc = " ".join((info.description or "").split()).replace("|", "\\|").replace("``", "`")
        lines.append(f"| `{name}` | {envs} | {default} | {doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    pathlib.Path("docs/settings.md").write_text(markdown_table())
