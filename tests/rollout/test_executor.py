"""What a multi-node executor ships to a worker is plain data: the runtime's config (with its
settings) survives pickling and JSON, and rebuilds the same runtime configuration."""

from __future__ import annotations

import pickle

from coding_agent_rl import settings
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.executor import Executor, InProcessExecutor
from coding_agent_rl.rollout.runtime import RuntimeConfig


def test_a_runtime_config_travels_to_a_worker(monkeypatch, tmp_path):
    monkeypatch.setenv("CODING_AGENT_RL_SANDBOX_OPTIONS", '{"memory": "8g"}')
    monkeypatch.setenv("SWE_AGENT_TIME_BUDGET_SEC", "90")
    conf = settings.load(out_dir=tmp_path)
    config = RuntimeConfig(
        policy="replay",
        rollout=RolloutConfig(backend=conf.sandbox, sandbox_options=dict(conf.sandbox_options)),
        settings=conf,
    )
    again = pickle.loads(pickle.dumps(config))
    assert again == config and again.settings.agent_budget_s == 90.0
    monkeypatch.delenv("SWE_AGENT_TIME_BUDGET_SEC")  # the worker's environment differs
    worker = settings.Settings.model_validate(conf.model_dump(mode="json"))
    assert worker == conf and worker.out_dir == tmp_path


def test_the_in_process_executor_is_an_executor():
    executor: Executor = InProcessExecutor(RuntimeConfig(policy="replay"), concurrency=2)
    assert executor.runtime.runner is None  # nothing starts before start()
