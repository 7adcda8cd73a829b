"""slime's native entry (``env.coding.build_env``) takes the rollout settings, as ``run`` does."""

from __future__ import annotations

import json
import types

from coding_agent_rl import settings
from coding_agent_rl.datasets import examples_dataset
from coding_agent_rl.env.coding import build_env


def _sample() -> types.SimpleNamespace:
    row = json.loads(examples_dataset().read_text().splitlines()[0])
    return types.SimpleNamespace(index=0, **row)


def _env(monkeypatch, **env: str):
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(examples_dataset().parent))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with settings.using(settings.load()):
        return build_env(sample=_sample(), args=types.SimpleNamespace())


def test_the_prompt_setting_reaches_the_native_prompt(monkeypatch):
    default = _env(monkeypatch)
    assert not default.prompt.startswith("FIX IN")
    env = _env(monkeypatch, CODING_AGENT_RL_PROMPT="FIX IN $workdir: $problem_statement")
    assert env.prompt.startswith("FIX IN /") and env.prompt != default.prompt


def test_the_parser_and_eval_settings_reach_the_native_config(monkeypatch):
    env = _env(
        monkeypatch, CODING_AGENT_RL_TOOL_PARSER="hermes", CODING_AGENT_RL_EVAL_TIMEOUT_S="42"
    )
    assert (env.config.tool_parser, env.config.eval_timeout_s) == ("hermes", 42.0)
