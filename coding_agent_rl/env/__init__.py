"""The native multi-turn loop: the policy acts through tool calls, an environment executes them.

* ``base.py`` — the environment contract (slime's ``BaseInteractionEnv``), env errors, outcomes;
* ``encoding.py`` — prompt and observation tokens (the dummy-messages delta);
* ``loop.py`` — :func:`run_episode`: generate, step, append; budgets, retries
  (``episode.py``: its config and result);
* ``turns.py`` — per-turn records, events and metrics; ``sample.py`` — episode -> Sample;
* ``coding.py`` + ``tools.py`` + ``editor.py`` — the coding environment (bash, file editor,
  submit) on a sandbox it is handed (the rollout pipeline creates, prepares and grades it);
  ``judge.py`` — an LLM-as-judge wrapper environment;
* ``slime_config.py`` — slime's YAML keys and environment modules (the entry point is
  ``coding_agent_rl.generate_native.generate``).

Environments are registered by name (:data:`ENVIRONMENTS`: ``coding``; third parties
add an entry point in the group ``coding_agent_rl.environments`` naming a module with
``build_env``); slime's ``rollout_interaction_env_path`` (a ``--custom-config-path`` YAML key) takes such a name, a dotted module or
a ``.py`` file.
"""

from __future__ import annotations

from coding_agent_rl.env.base import BaseInteractionEnv, EnvError, EnvOutcome, FatalEnvError
from coding_agent_rl.env.encoding import ChatEncoder, Encoded, ObservationError
from coding_agent_rl.env.episode import Episode, LoopConfig
from coding_agent_rl.env.loop import run_episode
from coding_agent_rl.env.turns import TurnRecord
from coding_agent_rl.registry import Registry

ENVIRONMENTS = Registry(
    "environment",
    "coding_agent_rl.environments",
    {
        "coding": ("coding_agent_rl.env.coding", None),
    },
)

__all__ = [
    "ENVIRONMENTS",
    "BaseInteractionEnv",
    "ChatEncoder",
    "Encoded",
    "EnvError",
    "EnvOutcome",
    "Episode",
    "FatalEnvError",
    "LoopConfig",
    "ObservationError",
    "TurnRecord",
    "run_episode",
]
