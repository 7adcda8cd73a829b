"""Adding a sandbox backend is one file + one entry point, and nothing else.

``ToySandbox`` below is a whole backend, defined in this test module: it delegates to the
Docker backend underneath and counts the sandboxes it creates. It is registered only through the
entry-point mechanism (``importlib.metadata.entry_points`` answers for the group
``coding_agent_rl.sandboxes`` as an installed package's metadata would). Then the full sandbox
contract suite (every backend-dependent test of ``test_contract.py``) runs on it, the CLI offers
it, and a replay rollout (real Claude Code, the replay CPU policy, clean-sandbox grading) runs
through it: agent and grading sandboxes alike come from the toy, no other file knows its name.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import uuid
from typing import Any, ClassVar

import pytest
import test_contract
from support import BASE_IMAGE

from coding_agent_rl.sandbox import BACKENDS, create_sandbox
from coding_agent_rl.sandbox.docker import DockerSandbox

GROUP = "coding_agent_rl.sandboxes"


@dataclasses.dataclass
class Backend:
    """What the contract suite's fixtures need of a backend (as tests/sandbox/conftest.py's)."""

    name: str
    image: str
    non_root: str
    options: dict[str, Any]

    def make(self, **options: Any) -> Any:
        return create_sandbox(self.name, self.image, **{**self.options, **options})


pytestmark = pytest.mark.docker


class ToySandbox(DockerSandbox):
    """A third-party backend: Docker underneath, its own name, counting what it creates."""

    backend = "toy"
    created: ClassVar[list[str]] = []

    async def _create(self) -> None:
        await super()._create()
        type(self).created.append(self.image)


def toy_entry_points(real: Any) -> Any:
    toy = importlib.metadata.EntryPoint(name="toy", value=f"{__name__}:ToySandbox", group=GROUP)

    def entry_points(**params: Any) -> Any:
        if params.get("group") == GROUP:
            return importlib.metadata.EntryPoints([toy])
        return real(**params)

    return entry_points


@pytest.fixture(autouse=True)
def toy_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata, "entry_points", toy_entry_points(importlib.metadata.entry_points)
    )
    ToySandbox.created.clear()


@pytest.fixture
def backend() -> Backend:
    """Replaces the contract suite's parametrised backends with the toy alone."""
    return Backend("toy", BASE_IMAGE, "nobody", {"run_id": f"test-{uuid.uuid4().hex[:8]}"})


# The contract suite, collected again here with the toy as its backend.
for _name, _test in vars(test_contract).items():
    if _name.startswith("test_") and {"sb", "backend"} & set(inspect.signature(_test).parameters):
        globals()[_name] = _test


def test_the_registry_and_the_cli_offer_the_toy() -> None:
    from coding_agent_rl.commands import run as run_command

    assert "toy" in BACKENDS.names() and BACKENDS.load("toy") is ToySandbox
    parser = __import__("argparse").ArgumentParser()
    run_command.add_arguments(parser)
    argv = ["--dataset", "x", "--out", "o", "--policy", "replay", "--sandbox", "toy"]
    args = parser.parse_args(argv)
    assert args.sandbox == "toy"
    assert isinstance(create_sandbox("toy", BASE_IMAGE), ToySandbox)


def test_the_toy_was_really_used_by_the_contract_suite(backend: Backend) -> None:
    async def one() -> None:
        async with backend.make() as sb:
            assert (await sb.exec("echo hi")).stdout == "hi\n"

    __import__("asyncio").run(one())
    assert ToySandbox.created == [BASE_IMAGE]


@pytest.mark.agents
async def test_a_replay_rollout_runs_through_the_toy(tmp_path: Any) -> None:
    from coding_agent_rl.datasets.schema import load_dataset
    from coding_agent_rl.images.dataset import build_dataset_images
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.runtime import Runtime, RuntimeConfig
    from coding_agent_rl.types import Sample

    tasks = test_contract.__file__.replace(
        "tests/sandbox/test_contract.py", "coding_agent_rl/datasets/examples/tasks.jsonl"
    )
    build_dataset_images(tasks)
    row = load_dataset(tasks)[0]
    run_id = f"toy-{uuid.uuid4().hex[:8]}"
    rollout = RolloutConfig(
        backend="toy",
        sandbox_options={"run_id": run_id},
        agent_budget_s=120.0,
        eval_timeout_s=60.0,
        out_dir=tmp_path,
    )
    rt = Runtime(RuntimeConfig(agent="claude_code", policy="replay", rollout=rollout))
    await rt.start()
    try:
        assert rt.runner is not None
        sample = Sample(index=0, group_index=0, prompt=row.prompt, label=row.label)
        sample.metadata = dict(row.metadata)
        outcome = await rt.runner.run(row, sample)
    finally:
        await rt.stop()
    record = outcome.record
    assert record["reward"] == 1.0 and record["failure_kind"] is None, record
    # the agent's sandbox and the grading sandbox both came from the toy backend
    assert ToySandbox.created.count(row.image) == 2, ToySandbox.created
    assert record["isolation"]["grading_network"] == "none"
