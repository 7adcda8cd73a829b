"""``coding-agent-rl run``'s flags default to the settings: a ``CODING_AGENT_RL_*`` variable and
its flag mean the same thing."""

from __future__ import annotations

import argparse

import pytest

from coding_agent_rl import settings
from coding_agent_rl.commands import run as run_command

REQUIRED = ["--dataset", "x.jsonl", "--out", "o", "--policy", "replay"]

# A value unlike each setting's default (and valid for the flag), as the environment spells it.
ENV_VALUES: dict[str, str] = {
    "agent": "codex",
    "sandbox": "local",
    "tokenizer": "/models/tok",
    "executor": "ray",
    "ray_address": "10.0.0.1:6379",
    "resume_attempts": "5",
    "tool_parser": "hermes",
    "reasoning_parser": "none",
    "agent_budget_s": "123.5",
    "eval_timeout_s": "77",
    "rollout_deadline_s": "4000",
    "reward_mode": "split",
    "tamper_policy": "flag",
    "twin_grade": "true",
    "tamper_reward": "-1",
    "agent_network": "open",
    "model_name": "my-model",
    "pool_size": "3",
    "fork_groups": "1",
}


def _parsed(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    with settings.using(settings.load()):
        run_command.add_arguments(p)
    return p.parse_args([*REQUIRED, *(argv or [])])


def _variable(name: str) -> str:
    return settings.PREFIX + name.upper()


def test_every_setting_backed_flag_is_listed_with_a_value():
    assert set(run_command.SETTING_FLAGS.values()) == set(ENV_VALUES)
    p = argparse.ArgumentParser()
    run_command.add_arguments(p)
    dests = {a.dest for a in p._actions}
    assert set(run_command.SETTING_FLAGS) <= dests


@pytest.mark.parametrize("dest", sorted(run_command.SETTING_FLAGS))
def test_the_variable_changes_the_flags_default(monkeypatch, dest):
    name = run_command.SETTING_FLAGS[dest]
    for other in ENV_VALUES:
        monkeypatch.delenv(_variable(other), raising=False)
    before = getattr(_parsed(), dest)
    assert before == _flag_value(settings.default(name), name)

    monkeypatch.setenv(_variable(name), ENV_VALUES[name])
    after = getattr(_parsed(), dest)
    expected = _flag_value(getattr(settings.load(), name), name)
    assert after == expected and after != before


def _flag_value(value, name: str):
    return "none" if name == "reasoning_parser" and value is None else value


def test_an_explicit_flag_still_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv("CODING_AGENT_RL_TAMPER_POLICY", "flag")
    monkeypatch.setenv("CODING_AGENT_RL_AGENT_BUDGET_S", "50")
    args = _parsed(["--tamper-policy", "zero", "--agent-budget", "9", "--no-twin-grade"])
    assert (args.tamper_policy, args.agent_budget, args.twin_grade) == ("zero", 9.0, False)


def test_settings_without_a_flag_reach_the_rollout_config(monkeypatch):
    """The prompt template and sandbox options come from the settings on the CLI path too
    (``--sandbox-option`` adds to them)."""
    monkeypatch.setenv("CODING_AGENT_RL_PROMPT", "fix: {problem_statement}")
    monkeypatch.setenv("CODING_AGENT_RL_SANDBOX_OPTIONS", '{"memory": "2g", "pids": 100}')
    monkeypatch.setenv("CODING_AGENT_RL_ROLLOUT_DEADLINE_S", "4000")
    with settings.using(settings.load()):
        p = argparse.ArgumentParser()
        run_command.add_arguments(p)
        config = run_command.build_config(p.parse_args([*REQUIRED, "--sandbox-option", "pids=7"]))
    rollout = config.rollout
    assert rollout.prompt_template == "fix: {problem_statement}"
    assert rollout.sandbox_options == {"memory": "2g", "pids": 7}
    assert rollout.deadline == 4000.0


def test_the_cli_uses_the_variable_end_to_end(monkeypatch, tmp_path, capsys):
    """Through ``cli.main``: a bad variable value is one line, before any flag is parsed."""
    from coding_agent_rl.cli import main

    monkeypatch.setenv("CODING_AGENT_RL_AGENT_BUDGET_S", "soon")
    assert main(["run", *REQUIRED]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "CODING_AGENT_RL_AGENT_BUDGET_S" in err


SHARED = {  # a RolloutConfig field -> a value unlike its setting's default
    "backend": "local",
    "sandbox_options": {"memory": "2g"},
    "agent_budget_s": 11.0,
    "eval_timeout_s": 12.0,
    "deadline_s": 99.0,
    "reward_mode": "split",
    "model_name": "m",
    "tamper_policy": "flag",
    "twin_grade": True,
    "tamper_reward": -1.0,
    "agent_network": "none",
    "prompt_template": "do {problem_statement}",
    "pool_size": 3,
    "pool_idle_s": 7.0,
    "fork_groups": True,
}


def _shared_settings() -> settings.Settings:
    from coding_agent_rl.rollout.config import SETTING_NAMES

    return settings.Settings(**{SETTING_NAMES.get(k, k): v for k, v in SHARED.items()})


def test_every_rollout_field_named_like_a_setting_takes_it():
    import dataclasses

    from coding_agent_rl.rollout.config import SETTING_NAMES, RolloutConfig

    shared = {
        f.name
        for f in dataclasses.fields(RolloutConfig)
        if SETTING_NAMES.get(f.name, f.name) in settings.Settings.model_fields
    }
    assert shared - {"out_dir"} == set(SHARED)
    config = RolloutConfig.from_settings(_shared_settings(), model_name="flag wins")
    assert {k: getattr(config, k) for k in SHARED} == {**SHARED, "model_name": "flag wins"}


def test_slimes_entry_builds_the_same_rollout_config_from_the_settings():
    """slime's path (``generate.runtime_config_from_args``) drops no rollout setting."""
    import types

    from coding_agent_rl.generate import runtime_config_from_args
    from coding_agent_rl.rollout.config import RolloutConfig

    conf = _shared_settings()
    args = types.SimpleNamespace(sglang_router_ip="127.0.0.1", sglang_router_port=1)
    rollout = runtime_config_from_args(args, conf).rollout
    expected = RolloutConfig.from_settings(conf)
    assert {k: getattr(rollout, k) for k in SHARED} == {k: getattr(expected, k) for k in SHARED}
