"""Real rollouts through slime's own code (vendored, unmodified: ``tests/support/slime_vendor.py``):
real Claude Code in Docker, real grading, the real adapter and tokenizer, the real CPU policy
server (speaking SGLang's API and its router's ``/workers``, aborts included) behind
``coding_agent_rl.generate``.

1. One rollout step of 2 prompts x 2 samples through slime's ``generate_and_rm_group``: a
   rollout that dispatches a subagent and solves (split into sibling samples), one that gives up,
   one that solves, one cut by ``rollout_max_response_len`` (TRUNCATED). slime calls our reward
   hook batched; its dynamic filter, ``--group-rm`` call and ``_convert_samples_to_train_data``
   (through ``--custom-reward-post-process-path``) run on the results.
2. slime's own ``abort()`` with 8 rollouts at mixed stages (waiting on the policy, running a long
   tool call between two policy requests, grading, queued before their sandbox boots): it
   returns within 5 s, every sandbox is gone, every rollout is one ABORTED placeholder. Without
   polling slime's abort flag, ``abort()`` waits for the rollouts that are not on the policy.
3. Task cancellation of ``generate`` is honoured too (sandboxes gone when it completes).

The policy picks its script by the routing key, i.e. by the ``session_id`` slime gives each sample,
which also checks that the adapter routes by it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import json
import subprocess
import time

import pytest
from support.rollout_helpers import EXAMPLES, containers, dataset_lines, solve_steps
from support.slime_path import REWARD_CALLS
from support.slime_vendor import fresh_state, slime, slime_args, trainer

from coding_agent_rl import generate as gen
from coding_agent_rl.policy.base import Completion, Policy, pseudo_logprob
from coding_agent_rl.policy.scripted import ScriptedPolicy

pytestmark = [pytest.mark.docker, pytest.mark.agents, pytest.mark.usefixtures("example_images")]

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 2048, "skip_special_tokens": False}
MAX_RESPONSE = 4000  # rollout_max_response_len: above every rollout here but the long one
SUB_PROMPT = "SUBTASK-7: list the repository"
HOLD_S = 240.0
SLEEP_S = 100  # the sleeping rollout's tool call: the shortest work an abort cuts short
SlimeSample = slime().Sample


class KeyedPolicy(Policy):
    """One scripted policy per routing-key prefix (``solve-...``, ``split-...``). Every reply
    carries its own weight version ``v<n>``. ``hold-...`` / ``wait-...`` requests wait until
    ``/abort_request`` names them, then answer ``finish_reason: abort`` with a partial output,
    as SGLang does. :attr:`served` counts the replies per session."""

    name = "keyed"

    def __init__(self, scripts: dict[str, dict]):
        self.scripts = {prefix: ScriptedPolicy(s) for prefix, s in scripts.items()}
        self.server = None
        self.count = 0
        self.versions: dict[str, list[str]] = collections.defaultdict(list)
        self.holding: set[str] = set()  # sessions with a request waiting right now
        self.aborted: list[str] = []
        self.served: collections.Counter[str] = collections.Counter()

    async def generate(self, request, env):
        prefix = request.session.split("-", 1)[0]
        if prefix in ("hold", "wait"):
            self.holding.add(request.session)
            try:
                await asyncio.wait_for(request.aborted.wait(), HOLD_S)
            finally:
                self.holding.discard(request.session)
            self.aborted.append(request.session)
            ids = env.encode("Let me look at")
            logprobs = [pseudo_logprob(t, i) for i, t in enumerate(ids)]
            return Completion(ids, logprobs, {"type": "abort", "message": "Abort in waiting queue"})
        done = await self.scripts[prefix].generate(request, env)
        self.count += 1
        self.server.weight_version = f"v{self.count}"  # read when the reply is built
        self.versions[request.session].append(self.server.weight_version)
        self.served[request.session] += 1
        return done


def slime_sample(name: str, index: int, group: int, session: str) -> SlimeSample:
    """What slime's data source builds from a JSONL line, with the session id it assigns."""
    line = dataset_lines()[name]
    return SlimeSample(
        group_index=group,
        index=index,
        rollout_id=index,
        prompt=line["prompt"],
        label=line["label"],
        metadata=json.loads(json.dumps(line["metadata"])),
        session_id=session,
    )


@pytest.fixture
async def slime_world(rows, tmp_path_factory, monkeypatch):
    """``start(scripts, **args)`` -> (args, policy, url): the policy server on loopback as
    slime's router, slime's args (its parser's defaults + the launch flags below) and a fresh
    slime ``GenerateState``, ``generate``'s process state reset; torn down after the test."""
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.sandbox.docker_engine import default_run_id
    from coding_agent_rl.tokenizer import build_qwen3_tokenizer

    tok = build_qwen3_tokenizer(tmp_path_factory.mktemp("qwen3-tokenizer"))
    servers = []
    monkeypatch.setenv("SWE_AGENT", "claude_code")
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(EXAMPLES))
    monkeypatch.setenv("SWE_AGENT_TIME_BUDGET_SEC", "300")
    monkeypatch.setenv("SWE_EVAL_TIMEOUT_SEC", "120")
    for name in ("_runtime", "_runtime_lock", "_writer"):
        monkeypatch.setattr(gen, name, None)

    async def start(scripts: dict[str, dict], **overrides):
        policy = KeyedPolicy(scripts)
        server = PolicyServer(policy, str(tok), "qwen3_coder")
        policy.server = server
        url = await server.start("127.0.0.1", 0)
        servers.append(server)
        args = slime_args(
            hf_checkpoint=str(tok),
            sglang_router_ip="127.0.0.1",
            sglang_router_port=int(url.rsplit(":", 1)[1]),
            sglang_tool_call_parser="qwen3_coder",
            sglang_reasoning_parser="qwen3",
            sglang_server_concurrency=4,
            rollout_max_context_len=32768,
            custom_generate_function_path="coding_agent_rl.generate.generate",
            custom_rm_path="support.slime_path.recorded_reward",
            custom_reward_post_process_path="coding_agent_rl.generate.post_process_rewards",
            grpo_std_normalization=False,
            n_samples_per_prompt=2,
            rollout_batch_size=2,
            rollout_temperature=1.0,
            rollout_max_response_len=MAX_RESPONSE,
        )
        for key, value in overrides.items():
            setattr(args, key, value)
        fresh_state(args)
        REWARD_CALLS.clear()
        return args, policy, url

    try:
        yield start
    finally:
        if gen._runtime is not None:
            await gen._runtime.stop()
        for server in servers:
            await server.stop()
    assert containers(default_run_id()) == [], "a sandbox was left behind"


def by_session(out: list[list[list[SlimeSample]]]) -> dict[str, list[SlimeSample]]:
    return {samples[0].session_id.split("-", 1)[0]: samples for group in out for samples in group}


async def test_a_rollout_step_as_slime_trains_it(slime_world, rows, tmp_path, monkeypatch):
    out_dir = tmp_path / "artifacts"
    monkeypatch.setenv("CODING_AGENT_RL_OUT_DIR", str(out_dir))
    subagent = {
        "tool": {
            "name": "Agent",
            "arguments": {
                "description": "List the repository",
                "prompt": SUB_PROMPT,
                "subagent_type": "general-purpose",
            },
        }
    }
    scripts = {
        "split": {
            "steps": [subagent, *solve_steps(rows["slugify"])],
            "rules": [
                {
                    "match_prompt": '(?<!": ")SUBTASK-7',
                    "steps": [{"shell": "ls"}, {"say": "SUB-DONE: listed."}],
                }
            ],
        },
        "giveup": {"steps": [{"say": "I give up."}]},
        "solve": {"steps": solve_steps(rows["pager"])},
        "long": {"steps": [{"shell": "seq 1 1500"}, {"say": "I give up."}]},
    }
    args, policy, _ = await slime_world(scripts)
    groups = [
        [slime_sample("slugify", 0, 0, "split-a"), slime_sample("slugify", 1, 0, "giveup-b")],
        [slime_sample("pager", 2, 1, "solve-c"), slime_sample("pager", 3, 1, "long-d")],
    ]
    inputs = [dataclasses.replace(s) for g in groups for s in g]
    sr = slime().sglang_rollout
    out = await asyncio.gather(*(sr.generate_and_rm_group(args, g, dict(SAMPLING)) for g in groups))
    got = by_session(out)
    print(
        "\n"
        + "\n".join(
            f"{k}: {[(s.metadata.get('segment'), s.status.value, s.response_length) for s in v]}"
            f" reward={v[0].reward} kind={v[0].metadata.get('failure_kind')}"
            f" why={v[0].metadata.get('abort_reason') or v[0].metadata['rollout_record'].get('fail_reason')}"
            for k, v in got.items()
        )
    )
    # slime's trainer: its rollout-id contract, then its flattening (RolloutManager._get_rollout_data)
    slime().ray_rollout.validate_rollout_id_annotated(out)
    flat = out
    while isinstance(flat[0], list):
        flat = list(itertools.chain.from_iterable(flat))
    Status = SlimeSample.Status
    for s in flat:
        assert type(s) is SlimeSample and type(s.status) is Status
        assert len(s.loss_mask) == len(s.rollout_log_probs) == s.response_length > 0
        assert s.response_length <= MAX_RESPONSE and len(s.tokens) <= 32768
    # slime called our hook batched, with nothing to score: the rewards came with the samples
    assert REWARD_CALLS == [[], [], [], []]
    # slime's own dynamic filter on our groups (each rollout one reward), and --group-rm's call
    for group in out:
        assert bool(slime().filters.check_reward_nonzero_std(args, group).keep) is True
        rewards = await slime().rm_hub.batched_async_rm(args, group)
        assert sorted(rewards) == [0.0, 1.0]

    # The split rollout: subagent + final siblings, one rollout id, each trained turn versioned.
    split = got["split"]
    assert [s.metadata["segment"] for s in split][-1] == "final" and len(split) >= 2
    assert "subagent" in {s.metadata["segment"] for s in split}
    assert {s.rollout_id for s in split} == {0} and all(s.reward == 1.0 for s in split)
    assert all(s.status is Status.COMPLETED for s in split)
    # The truncated rollout: cut by the response budget, and slime's flag says so.
    (long,) = got["long"]
    assert long.status is Status.TRUNCATED and long.response_length <= MAX_RESPONSE
    assert long.metadata["truncation_reason"] == "response"
    assert long.metadata["rollout_record"]["metrics"]["truncated"] == 1
    assert got["solve"][0].reward == 1.0 and got["giveup"][0].reward == 0.0
    assert got["giveup"][0].metadata["failure_kind"] == "model"

    # Routing by slime's session ids; per-turn weight versions in order.
    assert set(policy.versions) == {"split-a", "giveup-b", "solve-c", "long-d"}
    for key, samples in got.items():
        seen = policy.versions[samples[0].session_id]
        for s in samples:
            assert s.session_id == samples[0].session_id
            assert len(s.weight_versions) == len(s.metadata["trained_turns"]) > 0
            assert set(s.weight_versions) <= set(seen), key
            assert s.weight_versions == sorted(s.weight_versions, key=lambda v: int(v[1:]))
    assert len({v for s in split for v in s.weight_versions}) == sum(
        len(s.weight_versions) for s in split
    )  # each turn trained once

    data = trainer(args)._convert_samples_to_train_data(flat)
    order = [s.metadata["rollout_record"]["routing_key"].split("-")[0] for s in flat]
    want = {"split": 0.5, "giveup": -0.5, "solve": 0.5, "long": -0.5}
    assert data["rewards"] == [want[k] for k in order]
    assert data["truncated"] == [int(k == "long") for k in order]
    # slime's own normalisation of the same list: not 2 x 2, so one batch-wide row.
    args.custom_reward_post_process_path = None
    _, default = trainer(args)._post_process_rewards(flat)
    assert default != data["rewards"]

    # The per-rollout record in metadata, and the same artifacts as `run`.
    record = got["solve"][0].metadata["rollout_record"]
    assert record["f2p_passed"] == record["f2p_total"] > 0 and record["failure_kind"] is None
    assert record["timings"]["total_s"] > 0 and record["retries"] == 0
    lines = [json.loads(x) for x in (out_dir / "results.jsonl").read_text().splitlines()]
    assert sorted(r["routing_key"] for r in lines) == sorted(policy.versions)
    assert 'outcome="solved"} 2' in (out_dir / "metrics.prom").read_text()
    for r in lines:
        for name in ("diff", "agent_log", "test_log"):
            assert (out_dir / r["artifacts"][name]).is_file(), (r["routing_key"], name)
    assert not (out_dir / "samples.jsonl").exists()
    # slime's own objects were not changed by generate().
    assert all(s.status is Status.PENDING and s.tokens == [] for s in inputs)


async def hold_all(policy: KeyedPolicy, n: int) -> None:
    await until(lambda: len(policy.holding) >= n, f"{n} rollouts waiting on the policy", 180)


def slow_tests_steps(row) -> list[dict]:
    """Solve, then make the package's import sleep: grading runs long."""
    return [
        *solve_steps(row)[:-1],
        {"shell": "printf 'import time\\ntime.sleep(600)\\n' >> pager/__init__.py"},
        {"say": "I fixed the bug."},
    ]


def hung_tests(run_id: str) -> bool:
    """Whether a pytest process runs in one of the run's sandboxes."""
    for c in containers(run_id):
        top = subprocess.run(["docker", "top", c], capture_output=True, text=True)
        if "pytest" in top.stdout:
            return True
    return False


async def until(check, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("defence", ["on", "off"])
async def test_slimes_abort_returns_promptly_with_rollouts_at_every_stage(
    slime_world, rows, monkeypatch, defence
):
    """slime's real ``abort()``: it sets ``GenerateState.aborted``, drains the engines, then
    waits for every pending group. 8 rollouts, 4 in flight (two waiting on the policy, one
    running ``sleep`` between two policy requests, one grading tests that hang) and 4 queued
    before their sandbox boots. Polling the flag, ``abort()`` returns within a tenth of the
    shortest work it cuts short (10 s of a 100 s tool call; seconds when quiet) with one
    ABORTED placeholder per rollout and no sandbox left. Without it (defence off) the sleeping
    and grading rollouts run on and ``abort()`` has not returned after 10 s."""
    from coding_agent_rl import trainer_abort
    from coding_agent_rl.sandbox.docker_engine import default_run_id

    if defence == "off":
        monkeypatch.setattr(trainer_abort, "slime_abort_flag", lambda args: None)
    scripts = {
        "sleep": {
            "steps": [
                *[{"shell": f"python3 -c 'import time; time.sleep({SLEEP_S})'"}] * 5,
                {"say": "ok"},
            ]
        },
        "grade": {"steps": slow_tests_steps(rows["pager"])},
    }
    # slime lets all 8 into generate(); our executor runs 4 and queues 4 before their boot
    args, policy, _ = await slime_world(scripts, sglang_server_concurrency=8)
    keys = ["hold-a", "sleep-b", "grade-c", "hold-d", "wait-e", "wait-f", "wait-g", "wait-h"]
    task = {"grade": "pager"}
    groups = [
        [
            slime_sample(task.get(k.split("-")[0], "slugify"), i + j, i // 2, k)
            for j, k in enumerate(keys[i : i + 2])
        ]
        for i in range(0, 8, 2)
    ]
    state = slime().sglang_rollout.GenerateState(args)
    state.submit_generate_tasks(groups)
    grade_steps = len(scripts["grade"]["steps"])
    await until(lambda: {"hold-a", "hold-d"} <= policy.holding, "two rollouts on the policy")
    await until(lambda: policy.served["sleep-b"] >= 1, "the sleep tool call")
    await until(lambda: policy.served["grade-c"] >= grade_steps, "the grading rollout's end")
    run_id = default_run_id()
    deadline = time.monotonic() + 120
    while not await asyncio.to_thread(hung_tests, run_id):  # docker calls off the loop
        assert time.monotonic() < deadline, "timed out waiting for the hung hidden tests"
        await asyncio.sleep(0.1)
    assert len(containers(run_id)) >= 4
    tasks = list(state.pendings)
    t0 = time.monotonic()
    aborting = asyncio.ensure_future(slime().sglang_rollout.abort(args, rollout_id=0))
    if defence == "off":
        done, _ = await asyncio.wait({aborting}, timeout=10)
        assert not done and containers(run_id)  # slime still waits; sandboxes still up
        for t in state.pendings:  # clean up: task cancellation still tears everything down
            t.cancel()
        await asyncio.wait({aborting}, timeout=120)
        state.reset()
        await until(lambda: not containers(run_id), "teardown", 60)
        return
    collected = await aborting
    latency = time.monotonic() - t0
    state.reset()
    left = containers(run_id)
    rounds = policy.server.aborted_rids.count("*")  # slime re-aborts every 3 s until idle
    print(
        f"\nslime's abort() with 8 rollouts at mixed stages returned in {latency:.2f} s"
        f" ({rounds} abort round(s))"
    )
    assert latency < SLEEP_S / 10 and left == []  # a tenth of the shortest work it cuts short
    assert collected == []  # not a partial rollout: slime only waited
    assert {"hold-a", "hold-d"} <= set(policy.aborted)
    items = [item for t in tasks for item in t.result()]
    assert sorted(i[0].session_id for i in items) == sorted(keys)
    for item in items:
        (p,) = item
        why = (p.session_id, p.metadata.get("rollout_record"))
        assert item.status is SlimeSample.Status.ABORTED and p.remove_sample is True, why
        assert p.metadata["failure_kind"] == "aborted", (p.session_id, p.metadata)


async def test_a_cancelled_generate_returns_after_its_sandboxes_are_gone(slime_world):
    """Cancelling ``generate`` itself (what any trainer's task cancellation reaches): by the time
    the cancellation completes, the rollout's sandboxes (agent and grading) are destroyed."""
    from coding_agent_rl.sandbox.docker_engine import default_run_id

    args, policy, _ = await slime_world({})
    samples = [slime_sample("slugify", i, i, f"hold-{i}") for i in range(2)]
    tasks = [asyncio.ensure_future(gen.generate(args, s, dict(SAMPLING))) for s in samples]
    await hold_all(policy, 2)
    assert len(containers(default_run_id())) >= 2
    t0 = time.monotonic()
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    print(f"\ncancelled generate() returned after {time.monotonic() - t0:.2f} s")
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert containers(default_run_id()) == []


async def test_a_group_becomes_a_tree_and_slime_trains_it_with_step_credit(
    slime_world, rows, tmp_path, monkeypatch
):
    """CODING_AGENT_RL_TREE_ROLLOUTS: slime's group of 3 is a root (index 0) and two branches
    at turn 2, which replay the root's two file-writing turns and then follow their own scripts
    (one gives up, one solves). V(2) = V(0) = (1 + 0 + 1) / 3: root stretches [0, 2) -> 0 and
    [2, end) -> 1/3; the branches 0 - 2/3 and 1 - 2/3."""
    monkeypatch.setenv("CODING_AGENT_RL_TREE_ROLLOUTS", "1")
    monkeypatch.setenv("CODING_AGENT_RL_TREE_BRANCH_AT", "2")
    monkeypatch.setenv("CODING_AGENT_RL_OUT_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setattr(gen, "_trees", None)
    files = [{"shell": "echo one > one.txt"}, {"shell": "echo two > two.txt"}]
    scripts = {
        "root": {"steps": [*files, *solve_steps(rows["slugify"])]},
        "giveup": {"steps": [{"say": "I give up."}]},
        "solve": {"steps": solve_steps(rows["slugify"])},
    }
    args, policy, _ = await slime_world(
        scripts,
        n_samples_per_prompt=3,
        rollout_batch_size=1,
        custom_reward_post_process_path="coding_agent_rl.generate.post_process_tree_rewards",
    )
    group = [
        slime_sample("slugify", 0, 0, "root-a"),
        slime_sample("slugify", 1, 0, "giveup-b"),
        slime_sample("slugify", 2, 0, "solve-c"),
    ]
    sr = slime().sglang_rollout
    out = await sr.generate_and_rm_group(args, group, dict(SAMPLING))
    got = {samples[0].session_id.split("-", 1)[0]: samples for samples in out}
    slime().ray_rollout.validate_rollout_id_annotated([out])
    root, giveup, solve = got["root"], got["giveup"], got["solve"]
    assert {s.metadata["tree_stretch"][0] for s in root} == {0, 2}
    for name, samples, parent, at in (("giveup", giveup, 0, 2), ("solve", solve, 0, 2)):
        for s in samples:
            assert (s.metadata["tree_id"], s.metadata["parent_rollout_id"]) == (0, parent)
            assert s.metadata["branch_turn"] == at, name
        record = samples[0].metadata["rollout_record"]
        replay = record["tree"]["replay"]
        assert replay["replayed"] == 2 and replay["diverged"] == 0, replay
        # every sampled token trained, no replayed one
        metrics = record["metrics"]
        assert metrics["tokens_trained"] == replay["tokens_sampled"] > 0
        assert metrics["tokens_generated"] == replay["tokens_sampled"]
        # the replayed tokens are exactly the ones the root trains in its stretch [0, 2)
        first = [s for s in root if s.metadata["tree_stretch"][0] == 0]
        assert replay["tokens_replayed"] == sum(
            n for s in first for _, _, n in s.metadata["trained_turns"]
        )
        assert sum(sum(s.loss_mask) for s in samples) == replay["tokens_sampled"]
    assert all(s.metadata["parent_rollout_id"] is None for s in root)
    # The branches' policies never saw the replayed turns: one request each after the prefix
    # (give up) / the solve steps; the root's policy served all of its own turns.
    assert policy.served["giveup-b"] == 1
    assert policy.served["solve-c"] == len(solve_steps(rows["slugify"]))
    assert root[0].reward == solve[0].reward == 1.0 and giveup[0].reward == 0.0
    # The replayed tool calls ran again in each branch's own sandbox: the files the root's first
    # two turns wrote are in every diff, though the branches' own policies never wrote them.
    for samples in (root, giveup, solve):
        rel = samples[0].metadata["rollout_record"]["artifacts"]["diff"]
        diff = (tmp_path / "artifacts" / rel).read_text()
        assert "+one" in diff and "+two" in diff, rel

    flat = [s for samples in out for s in samples]
    data = trainer(args)._convert_samples_to_train_data(flat)
    want = {("root", 0): 0.0, ("root", 2): 1 / 3, ("giveup", None): -2 / 3, ("solve", None): 1 / 3}
    keys = []
    for s in flat:
        name = s.session_id.split("-", 1)[0]
        keys.append((name, s.metadata["tree_stretch"][0] if name == "root" else None))
    assert data["rewards"] == pytest.approx([want[k] for k in keys])
    assert data["rollout_ids"] == [s.rollout_id for s in flat] and set(data["rollout_ids"]) == {
        0,
        1,
        2,
    }


async def test_slimes_group_gets_its_samples_from_one_preparation(slime_world, rows, monkeypatch):
    """With fork_groups, slime's ``generate_and_rm_group`` of n samples of one task prepares the
    task once (a snapshot) and every sample runs in its own copy, and is graded in a copy of one
    grading set-up; the snapshots go with the group."""
    from coding_agent_rl.sandbox import docker_engine as engine
    from coding_agent_rl.sandbox.admission import STATS

    monkeypatch.setenv("CODING_AGENT_RL_FORK_GROUPS", "1")
    args, _, _ = await slime_world({"solve": {"steps": solve_steps(rows["pager"])}})
    stats, grading = STATS["docker"], STATS["docker-grading"]
    prepared, copies = stats.prepared, stats.copies
    graded, graded_copies = grading.prepared, grading.copies
    group = [slime_sample("pager", i, 0, f"solve-{i}") for i in range(2)]
    out = await slime().sglang_rollout.generate_and_rm_group(args, group, dict(SAMPLING))
    assert [samples[0].reward for samples in out] == [1.0, 1.0]
    assert (stats.prepared - prepared, stats.copies - copies) == (1, 2)
    # Their grading sandboxes too: one set-up, two copies.
    assert (grading.prepared - graded, grading.copies - graded_copies) == (1, 2)
    owned = engine.owner_labels()["coding-agent-rl.owner.pid"]
    mine = [
        i for i in engine.list_images() if i["Labels"].get("coding-agent-rl.owner.pid") == owned
    ]
    assert mine == []  # the group's snapshot was removed when its copies were done
