"""CPU policies speaking SGLang's ``/generate`` (stand-ins for a served model: replay, scripted,
a small HF model), their server, and the HF logprob check. Specs: ``scripted:FILE`` (a JSON
script), ``replay`` (each session's registered gold patch), ``hf:MODEL_DIR`` (a local
transformers causal LM on CPU)."""

from __future__ import annotations

from pathlib import Path

from coding_agent_rl.policy.base import Policy


def load_policy(spec: str) -> Policy:
    """Build a policy from its spec; ``ValueError`` names what is wrong."""
    kind, _, arg = spec.partition(":")
    if kind == "scripted":
        from coding_agent_rl.policy.scripted import ScriptedPolicy

        if not arg or not Path(arg).is_file():
            raise ValueError(f"scripted policy: script file {arg!r} not found")
        return ScriptedPolicy.from_file(arg)
    if kind == "replay" and not arg:
        from coding_agent_rl.policy.replay import ReplayPolicy

        return ReplayPolicy()
    if kind == "hf":
        if not arg or not Path(arg).is_dir():
            raise ValueError(f"hf policy: model directory {arg!r} not found")
        from coding_agent_rl.policy.hf import HFPolicy

        return HFPolicy(arg)
    raise ValueError(f"unknown policy spec {spec!r}: use scripted:FILE, replay or hf:MODEL_DIR")
