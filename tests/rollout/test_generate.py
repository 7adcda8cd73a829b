"""``generate()`` and ``reward()`` called exactly as slime calls them: a slime-style ``args``
namespace (a tokenizer directory as ``hf_checkpoint``, a policy server on loopback as the SGLang
router, slime's parser names), a ``Sample`` made from a raw dataset line, ``SWE_AGENT`` in the
environment. The policy is the real CPU ``PolicyServer`` with a scripted policy (under slime no
one registers per-session data, so replay cannot be used): it solves one task with the gold patch
through Claude Code's shell tool and gives up on another."""

from __future__ import annotations

import asyncio
import inspect
import json
import types

import pytest
from support.rollout_helpers import EXAMPLES, dataset_lines, solve_steps, task_rule

from coding_agent_rl import generate as gen
from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.types import Sample, Status

pytestmark = [pytest.mark.docker, pytest.mark.agents]

SAMPLING = {"temperature": 0.7, "top_p": 0.95, "max_new_tokens": 2048, "skip_special_tokens": False}


class RecordingScripted(ScriptedPolicy):
    """The scripted policy, remembering each session's sampling params."""

    def __init__(self, script):
        super().__init__(script)
        self.sampling: dict[str, dict] = {}

    async def generate(self, request, env):
        self.sampling[request.session] = dict(request.sampling)
        return await super().generate(request, env)


def slime_sample(line: dict, index: int) -> Sample:
    """What slime's dataset reader builds from a JSONL line (no rollout_id yet)."""
    return Sample(
        group_index=index,
        index=index,
        prompt=line["prompt"],
        label=line["label"],
        metadata=json.loads(json.dumps(line["metadata"])),
    )


@pytest.fixture
async def slime(rows, tmp_path_factory, monkeypatch):
    from support.rollout_helpers import containers

    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.sandbox.docker_engine import default_run_id
    from coding_agent_rl.tokenizer import build_qwen3_tokenizer

    tok = build_qwen3_tokenizer(tmp_path_factory.mktemp("qwen3-tokenizer"))
    script = {
        "rules": [
            task_rule(rows["slugify"], solve_steps(rows["slugify"])),
            task_rule(rows["pager"], [{"say": "I give up."}]),
        ]
    }
    policy = RecordingScripted(script)
    server = PolicyServer(policy, str(tok), "qwen3_coder")
    url = await server.start("127.0.0.1", 0)
    args = types.SimpleNamespace(
        hf_checkpoint=str(tok),
        sglang_router_ip="127.0.0.1",
        sglang_router_port=int(url.rsplit(":", 1)[1]),
        rollout_max_context_len=32768,
        rollout_max_response_len=4096,
        sglang_tool_call_parser="qwen3_coder",
        sglang_reasoning_parser="qwen3",
    )
    monkeypatch.setenv("SWE_AGENT", "claude_code")
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(EXAMPLES))  # slime reads the JSONL
    monkeypatch.setenv("SWE_AGENT_TIME_BUDGET_SEC", "300")
    monkeypatch.setenv("SWE_EVAL_TIMEOUT_SEC", "120")
    monkeypatch.setattr(gen, "_runtime", None)
    monkeypatch.setattr(gen, "_runtime_lock", None)
    try:
        yield args, policy
    finally:
        if gen._runtime is not None:
            await gen._runtime.stop()
        await server.stop()
    assert containers(default_run_id()) == [], "generate() left a container behind"


def test_signatures_are_the_ones_slime_inspects():
    assert list(inspect.signature(gen.generate).parameters)[:3] == [
        "args", "sample", "sampling_params",
    ]  # fmt: skip
    assert "evaluation" in inspect.signature(gen.generate).parameters
    assert list(inspect.signature(gen.reward).parameters) == ["args", "sample"]
    assert inspect.iscoroutinefunction(gen.generate) and inspect.iscoroutinefunction(gen.reward)


async def test_generate_as_slime_calls_it(slime):
    args, policy = slime
    raw = dataset_lines()
    solved = slime_sample(raw["slugify"], 0)
    evaluated = slime_sample(raw["pager"], 1)
    no_image = slime_sample(raw["money"], 2)
    del no_image.metadata["image"]
    missing_image = slime_sample(raw["editor"], 3)
    missing_image.metadata["image"] = "coding-agent-rl/no-such-image:latest"

    out = await asyncio.gather(
        gen.generate(args, solved, dict(SAMPLING)),
        gen.generate(args, evaluated, dict(SAMPLING), evaluation=True),
        gen.generate(args, no_image, dict(SAMPLING)),
        gen.generate(args, missing_image, dict(SAMPLING)),
    )
    got_solved, got_eval, got_no_image, got_missing = out
    for samples in out:
        assert isinstance(samples, list) and samples
        for s in samples:
            assert isinstance(s, Sample)
            s.check()
        assert len({s.rollout_id for s in samples}) == 1 and samples[0].rollout_id is not None

    # A solved rollout: trainable samples carrying the reward, one rollout id.
    assert {s.rollout_id for s in got_solved} == {0}
    for s in got_solved:
        assert s.reward == 1.0 and not s.remove_sample
        assert s.status in (Status.COMPLETED, Status.TRUNCATED)
        assert s.metadata["instance_id"] == "example__slugify"
        assert s.metadata["segment"] in ("final", "wipe", "subagent")
        assert sum(s.loss_mask) > 0 and s.response_length > 0
        assert s.session_id in policy.sampling
        assert await gen.reward(args, s) == 1.0
    # slime's sampling params reached the policy server (through the adapter).
    seen = policy.sampling[got_solved[0].session_id]
    assert seen["temperature"] == 0.7 and seen["top_p"] == 0.95
    assert seen["max_new_tokens"] <= 2048

    # Evaluation: one scored sample (the policy gave up: reward 0, not an abort).
    assert len(got_eval) == 1
    (e,) = got_eval
    assert e.reward == 0.0 and not e.remove_sample and e.status != Status.ABORTED
    assert e.metadata["failure_kind"] == "model"
    assert await gen.reward(args, e) == 0.0

    # A row without an image: slime's aborted placeholder, without touching Docker.
    for placeholder, kind, words in (
        (got_no_image, "data", "image"),
        (got_missing, "infra", "no-such-image"),
    ):
        assert len(placeholder) == 1
        (p,) = placeholder
        assert p.remove_sample and p.status == Status.ABORTED
        assert p.tokens == [0, 0] and p.response_length == 1
        assert p.loss_mask == [0] and p.rollout_log_probs == [0.0] and p.reward == 0.0
        assert p.metadata["failure_kind"] == kind
        assert words in p.metadata["abort_reason"]
        assert await gen.reward(args, p) == 0.0


async def test_generate_isolates_like_run(slime, monkeypatch):
    """Under slime, too: the sandbox options from the environment, default limits, adapter-only
    egress. A memory hog ends as the model's failure naming the limit; a probe of listeners on
    every host address reaches none of them."""
    from coding_agent_rl.sandbox.netns import host_ipv4_addresses

    args, policy = slime
    monkeypatch.setenv("CODING_AGENT_RL_SANDBOX_OPTIONS", json.dumps({"memory": "1g"}))
    monkeypatch.delenv("CODING_AGENT_RL_AGENT_NETWORK", raising=False)
    accepted = []
    servers = [
        await asyncio.start_server(lambda r, w: (accepted.append(1), w.close()), addr, 0)
        for addr in host_ipv4_addresses()
    ]
    dial = "".join(
        f"timeout 3 bash -c 'exec 3<>/dev/tcp/{h}/{p}' 2>/dev/null; "
        for h, p in (s.sockets[0].getsockname()[:2] for s in servers)
    )
    raw = dataset_lines()
    hog = {"shell": "python3 -c 'x = bytearray(2 << 30); x[::4096] = b\"x\" * len(x[::4096])'"}
    for name, steps in (("daterange", [hog]), ("confparse", [{"shell": dial}])):
        rule = {"match_prompt": raw[name]["prompt"].splitlines()[0], "steps": steps}
        policy.rules.insert(0, policy._check_rule({**rule, "steps": [*steps, {"say": "ok"}]}, name))
    try:
        hogged, probed = await asyncio.gather(
            gen.generate(args, slime_sample(raw["daterange"], 10), dict(SAMPLING)),
            gen.generate(args, slime_sample(raw["confparse"], 11), dict(SAMPLING)),
        )
    finally:
        for s in servers:
            s.close()
    runner = gen._runtime.runner
    assert runner.network.mode == "adapter-only" and runner.config.sandbox_options == {
        "memory": "1g"
    }
    (h,) = {s.metadata["limit_breach"] for s in hogged}
    assert h.startswith("memory limit 1 GiB exceeded")
    assert all(s.metadata["failure_kind"] == "model" and not s.remove_sample for s in hogged)
    assert accepted == [] and all(s.metadata["failure_kind"] == "model" for s in probed)


@pytest.mark.parametrize("capability", ["on", "off"])
async def test_generate_with_the_local_backend(slime, monkeypatch, capability):
    """slime's ``generate()`` with ``CODING_AGENT_RL_SANDBOX=local``: the backend's capabilities
    (a read-only image whose task sandboxes get /etc and our tree writable, host files bind-
    mounted) apply under slime as under ``run``. With the read-only-image capability switched
    off (as when only ``run`` applied the local options) the rollout cannot set up its task and
    ends as an infrastructure failure."""
    from coding_agent_rl.images.dataset import build_dataset_images
    from coding_agent_rl.sandbox.local import LocalSandbox, bwrap_reason

    if reason := bwrap_reason():
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
    build_dataset_images(EXAMPLES / "tasks.jsonl", kind="rootfs")
    monkeypatch.setenv("CODING_AGENT_RL_SANDBOX", "local")
    if capability == "off":
        monkeypatch.setattr(LocalSandbox, "read_only_image", False)
    args, _ = slime
    samples = await gen.generate(args, slime_sample(dataset_lines()["slugify"], 20), dict(SAMPLING))
    record = samples[0].metadata.get("rollout_record", samples[0].metadata)
    if capability == "on":
        assert all(s.reward == 1.0 and not s.remove_sample for s in samples), record
        assert gen._runtime.runner.config.backend == "local"
    else:
        (p,) = samples
        assert p.remove_sample and p.metadata["failure_kind"] == "infra", record
