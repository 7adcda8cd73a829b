"""Harness options and their environment variables (no sandbox needed)."""

from __future__ import annotations

import pathlib

import pytest

from coding_agent_rl.harness import HARNESSES, HarnessConfigError, HarnessContext, get_harness
from coding_agent_rl.harness.options import args_from_env, env_from_env
from coding_agent_rl.registry import UnknownName
from coding_agent_rl.sandbox import BACKENDS


def ctx(**kw) -> HarnessContext:
    base = dict(
        adapter_url="http://172.17.0.1:18001",
        session_id="sid-1",
        model="policy-x",
        workdir="/testbed",
    )
    return HarnessContext(**{**base, **kw})


def test_registry_lists_the_three_builtin_harnesses():
    assert {"claude_code", "codex", "opencode"} <= set(HARNESSES.names())
    with pytest.raises(UnknownName, match=r"known: .*claude_code"):
        get_harness("no-such-agent")


def test_unknown_option_is_rejected_and_valid_ones_are_named():
    with pytest.raises(HarnessConfigError, match=r"colour.*valid: .*extra_args"):
        get_harness("codex", colour="red")


def test_extra_args_accept_slime_shell_words_and_json(monkeypatch):
    monkeypatch.setenv(
        "SLIME_AGENT_CC_EXTRA_ARGS", "--settings '{\"a\": 1}' --disallowedTools WebFetch"
    )
    assert args_from_env("SLIME_AGENT_CC_EXTRA_ARGS") == [
        "--settings",
        '{"a": 1}',
        "--disallowedTools",
        "WebFetch",
    ]
    monkeypatch.setenv("SLIME_AGENT_CC_EXTRA_ARGS", '["--max-turns", "3"]')
    h = get_harness("claude_code")
    assert h.full_argv(ctx(), "do it")[-2:] == ["--max-turns", "3"]


@pytest.mark.parametrize(
    "name,value",
    [
        ("SLIME_AGENT_CC_EXTRA_ENVS", "{not json"),
        ("SLIME_AGENT_CC_EXTRA_ENVS", '["a list"]'),
        ("SLIME_AGENT_CC_EXTRA_ARGS", '["unterminated"'),
        ("SLIME_AGENT_CC_EXTRA_ARGS", "--settings '{"),
    ],
)
def test_bad_extra_value_names_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(HarnessConfigError, match=name):
        get_harness("claude_code")


def test_extra_env_is_merged_last_and_context_env_wins(monkeypatch):
    monkeypatch.setenv(
        "SLIME_AGENT_CC_EXTRA_ENVS", '{"DISABLE_TELEMETRY": "0", "MAX_THINKING_TOKENS": 64}'
    )
    h = get_harness("claude_code")
    env = h.full_env(ctx(env={"MAX_THINKING_TOKENS": "7"}))
    assert env["DISABLE_TELEMETRY"] == "0"
    assert env["MAX_THINKING_TOKENS"] == "7"
    assert env_from_env("SLIME_AGENT_CC_EXTRA_ENVS")["MAX_THINKING_TOKENS"] == "64"


def test_claude_code_points_every_model_alias_at_the_policy():
    h = get_harness("claude_code", extra_args=[], extra_env={})
    env = h.full_env(ctx())
    assert env["ANTHROPIC_BASE_URL"] == "http://172.17.0.1:18001"  # no /v1
    assert env["ANTHROPIC_AUTH_TOKEN"] == "sid-1"
    aliases = [k for k in env if k.endswith("_MODEL")]
    assert len(aliases) == 6 and {env[k] for k in aliases} == {"policy-x"}
    assert env["ENABLE_TOOL_SEARCH"] == "false"
    assert "IS_SANDBOX" not in env
    assert h.full_env(ctx(user="root"))["IS_SANDBOX"] == "1"
    argv = h.full_argv(ctx(), "fix it")
    assert argv[:3] == ["/opt/coding-agent-rl/bin/claude", "-p", "fix it"]
    assert "bypassPermissions" in argv and "stream-json" in argv


def test_codex_config_uses_responses_api_and_no_tmpdir_home():
    h = get_harness("codex", extra_args=[], extra_env={})
    c = ctx(model='odd"name')
    ((path, toml),) = h.config_files(c).items()
    assert path == "/home/agent/.codex/config.toml"
    assert 'base_url = "http://172.17.0.1:18001/v1"' in toml
    assert 'wire_api = "responses"' in toml and 'model = "odd\\"name"' in toml
    assert "[analytics]\nenabled = false" in toml and "[features]\nplugins = false" in toml
    env = h.full_env(c)
    assert env["CODEX_HOME"] == "/home/agent/.codex" and env["CODING_AGENT_RL_SESSION"] == "sid-1"
    assert h.full_argv(c, "p")[1:] == [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "p",
    ]


def test_context_rejects_a_tag_that_is_not_a_plain_name():
    with pytest.raises(HarnessConfigError):
        ctx(tag="../etc")


def test_adapter_address_overrides(monkeypatch):
    monkeypatch.setenv("ADAPTER_BIND_HOST", "10.1.2.3")
    monkeypatch.setenv("ADAPTER_PUBLIC_HOST", "adapter.internal")
    assert BACKENDS.load("docker").adapter_bind_host() == "10.1.2.3"
    assert BACKENDS.load("e2b").host_url(18001) == "http://adapter.internal:18001"
    monkeypatch.delenv("ADAPTER_PUBLIC_HOST")
    monkeypatch.delenv("ADAPTER_BIND_HOST")
    assert BACKENDS.load("local").adapter_bind_host() == "127.0.0.1"
    assert BACKENDS.load("e2b").adapter_bind_host() == "0.0.0.0"
    with pytest.raises(ValueError, match="ADAPTER_PUBLIC_HOST"):
        BACKENDS.load("e2b").host_url(18001)


def test_harness_files_are_small_data_files():
    # The one-file claim: each built-in harness stays a short, mostly-data module.
    root = pathlib.Path(__file__).parents[2] / "coding_agent_rl/harness"
    for name in ("claude_code", "codex", "opencode"):
        assert len((root / f"{name}.py").read_text().splitlines()) < 100
