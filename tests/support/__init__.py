"""Test support shared across layers, imported as a package (``from support.X import ...``;
pytest puts ``tests/`` on ``sys.path``): slime's own vendored code (``slime_vendor``), stand-ins for what cannot run here (E2B's SDK,
SGLang), helpers (rollout scripts and checks, trajectory simulation, images, report parsing,
upstream repositories), and the fixtures every folder shares (:mod:`support.fixtures`,
registered by ``tests/conftest.py``)."""

BASE_IMAGE = "coding-agent-rl/base:latest"  # `coding-agent-rl images base` builds it
