"""``coding-agent-rl run --executor ray`` on a real two-node Ray cluster on this machine, each
node with its own Docker engine: node 0 the main engine, node 1 a second ``dockerd`` started here
(its own socket, data root and bridge), the task images loaded into it. Real Claude Code, the
replay policy (each worker runs its own), grading in clean sandboxes on the node's own engine.

Rollouts spread over both nodes and all solve, their artifacts shipped back to the driver's
folder; Ctrl-C mid-run leaves no sandbox on either engine; slime's ``generate()`` submits to the
same pool (artifacts to a shared folder); ``bench rollout --executor ray`` runs on 1 then 2 of
its nodes; last, node 1's Ray processes are killed mid-run: every rollout still ends exactly once
(the lost ones retried on node 0, the lost attempt recorded as infra ``node_lost``), and once the
dead node's orphans are reaped (the pass a runtime start makes, ``sandboxes gc --orphans``
against its engine) no container is left on either engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from support.rollout_helpers import LABEL, TASKS, containers, dataset_lines, reap

from coding_agent_rl.commands.bench.ray_cluster import LocalCluster, NodeSpec, SecondEngine
from coding_agent_rl.rollout.ray_worker import WORKER_DIR, reap_worker_dirs

pytestmark = [pytest.mark.docker, pytest.mark.agents]

CLI = [sys.executable, "-m", "coding_agent_rl.cli"]
N_TASKS = 2  # the first tasks of the examples (their images are loaded into the second engine)
SLOTS = 2


class Cluster:
    def __init__(self, ray: LocalCluster, engine: SecondEngine):
        self.ray, self.engine = ray, engine


@pytest.fixture(scope="session")
def cluster(example_images, example_rows) -> Iterator[Cluster]:
    names = list(dataset_lines())[:N_TASKS]
    engine = SecondEngine()
    ray: LocalCluster | None = None
    try:
        engine.start()
        engine.load([example_rows[n].image for n in names])
        ray = LocalCluster([NodeSpec(SLOTS), NodeSpec(SLOTS, docker_host=engine.host)]).start()
        yield Cluster(ray, engine)
    finally:
        if ray is not None:
            ray.close()
        engine.close()


def start_run(c: Cluster, out: pathlib.Path, run_id: str, *args: str) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "RAY_ADDRESS")}
    with (out.parent / f"{out.name}.log").open("w") as log:  # the child keeps its copy
        return subprocess.Popen(
            [
                *CLI,
                "run",
                "--dataset",
                str(TASKS),
                "--limit",
                str(N_TASKS),
                "--policy",
                "replay",
                "--executor",
                "ray",
                "--ray-address",
                c.ray.address,
                "--sandbox-option",
                f"run_id={run_id}",
                "--agent-budget",
                "300",
                "--eval-timeout",
                "120",
                "--out",
                str(out),
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )


def finish(proc: subprocess.Popen, out: pathlib.Path, timeout: float) -> dict[str, Any]:
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    finally:
        reap(proc)
    log = (out.parent / f"{out.name}.log").read_text()
    assert proc.returncode == 0, log[-4000:]
    return json.loads(stdout.strip().splitlines()[-1])


def results(out: pathlib.Path) -> list[dict[str, Any]]:
    text = (out / "results.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_rollouts_spread_over_both_nodes_and_all_solve(cluster, tmp_path):
    run_id = f"ray-spread-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "spread"
    proc = start_run(cluster, out, run_id, "--n-samples", "2", "--pool-size", "1")
    printed = finish(proc, out, 600)
    records = results(out)
    assert printed["total"] == len(records) == 2 * N_TASKS
    assert printed["solved"] == len(records), [r["abort_reason"] for r in records]
    assert all(r["reward"] == 1.0 and r["failure_kind"] is None for r in records)
    # every record names its node and engine; both nodes, each on its own engine, ran some
    engines = {r["node"]: r["engine"] for r in records}
    assert len(engines) == 2, Counter(r["node"] for r in records)
    assert sorted(engines.values()) == sorted(["unix:///var/run/docker.sock", cluster.engine.host])
    # Each node's pool was told its rows ahead (a group planned on one node): its first claim
    # at least found a sandbox prepared for it.
    pooled = Counter(r["node"] for r in records if r.get("sandbox_source") == "pool")
    assert len(pooled) == 2, [(r["node"], r.get("sandbox_source")) for r in records]
    assert all(r.get("sandbox_source") in ("pool", "prepared") for r in records)
    # back-pressure: never more in flight than the slots
    summary = json.loads((out / "summary.json").read_text())
    stats = summary["executor"]
    assert stats["slots"] == 2 * SLOTS and 1 <= stats["max_in_flight"] <= 2 * SLOTS
    assert sum(n["finished"] for n in stats["nodes"].values()) == len(records)
    # the artifacts came back to the driver's folder within the budget
    for r in records:
        diff = (out / r["artifacts"]["diff"]).read_text()
        assert diff.startswith("diff --git"), diff[:200]
        assert (out / r["artifacts"]["agent_log"]).stat().st_size > 0
        assert (out / r["artifacts"]["test_log"]).is_file()
        assert "artifacts_truncated" not in r
    samples = (out / "samples.jsonl").read_text().splitlines()
    assert len({json.loads(s)["rollout_id"] for s in samples}) == len(records)
    assert containers(run_id) == [] and cluster.engine.containers(f"{LABEL}={run_id}") == []


def test_ctrl_c_leaves_no_sandbox_on_any_node(cluster, tmp_path):
    """SIGINT to the driver mid-run: the workers' rollouts are cancelled and their sandboxes
    destroyed on both engines before the command exits."""
    run_id = f"ray-sigint-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "sigint"
    proc = start_run(cluster, out, run_id, "--n-samples", "2")
    label = f"{LABEL}={run_id}"
    deadline = time.monotonic() + 180
    try:
        while not (containers(run_id) and cluster.engine.containers(label)):
            assert proc.poll() is None and time.monotonic() < deadline, "not on both nodes"
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        reap(proc)
    assert containers(run_id) == [] and cluster.engine.containers(label) == []


async def test_slime_generate_submits_to_the_pool_on_the_cluster(
    cluster, rows, tmp_path_factory, monkeypatch
):
    """slime's ``generate()`` with ``CODING_AGENT_RL_EXECUTOR=ray``: the rollouts run on the
    workers of the cluster, which call the policy server (slime's router) directly."""
    from support.rollout_helpers import EXAMPLES, solve_steps, task_rule

    from coding_agent_rl import generate as gen
    from coding_agent_rl.policy.scripted import ScriptedPolicy
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.tokenizer import build_qwen3_tokenizer
    from coding_agent_rl.types import Sample

    tok = build_qwen3_tokenizer(tmp_path_factory.mktemp("qwen3-tokenizer"))
    names = list(dataset_lines())[:2]
    policy = ScriptedPolicy({"rules": [task_rule(rows[n], solve_steps(rows[n])) for n in names]})
    server = PolicyServer(policy, str(tok), "qwen3_coder")
    url = await server.start("127.0.0.1", 0)
    args = SimpleNamespace(
        hf_checkpoint=str(tok),
        sglang_router_ip="127.0.0.1",
        sglang_router_port=int(url.rsplit(":", 1)[1]),
        rollout_max_context_len=32768,
        rollout_max_response_len=4096,
        sglang_tool_call_parser="qwen3_coder",
        sglang_reasoning_parser="qwen3",
    )
    run_id = f"ray-slime-{uuid.uuid4().hex[:8]}"
    shared = tmp_path_factory.mktemp("shared-artifacts")  # a folder every node sees
    for key, value in {
        "CODING_AGENT_RL_OUT_DIR": str(tmp_path_factory.mktemp("slime-out")),
        "CODING_AGENT_RL_RAY_ARTIFACT_DIR": str(shared),
        "CODING_AGENT_RL_EXECUTOR": "ray",
        "CODING_AGENT_RL_RAY_ADDRESS": cluster.ray.address,
        "SWE_AGENT": "claude_code",
        "CODING_AGENT_RL_DATASET_DIR": str(EXAMPLES),
        "SWE_AGENT_TIME_BUDGET_SEC": "300",
        "SWE_EVAL_TIMEOUT_SEC": "120",
        "CODING_AGENT_RL_SANDBOX_OPTIONS": json.dumps({"run_id": run_id}),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(gen, "_runtime", None)
    monkeypatch.setattr(gen, "_runtime_lock", None)
    lines = dataset_lines()
    batch = [
        Sample(group_index=i, index=i, prompt=lines[n]["prompt"], label=lines[n]["label"],
               metadata=json.loads(json.dumps(lines[n]["metadata"])))
        for i, n in enumerate(names * 2)
    ]  # fmt: skip
    try:
        out = await asyncio.gather(
            *(gen.generate(args, s, {"temperature": 1.0, "max_new_tokens": 2048}) for s in batch)
        )
    finally:
        if gen._runtime is not None:
            await gen._runtime.stop()
        await server.stop()
    nodes = set()
    for samples in out:
        assert samples and all(s.reward == 1.0 and not s.remove_sample for s in samples)
        record = samples[0].metadata["rollout_record"]
        assert record["failure_kind"] is None and record["engine"]
        nodes.add(record["node"])
        # the workers wrote the artifacts straight to the shared folder
        assert record["artifacts_dir"] == str(shared)
        assert (shared / record["artifacts"]["diff"]).read_text().startswith("diff --git")
    assert len(nodes) == 2, nodes  # four rollouts on 2 + 2 slots: both nodes ran some
    assert containers(run_id) == [] and cluster.engine.containers(f"{LABEL}={run_id}") == []


@pytest.mark.slow
def test_bench_rollout_on_one_node_then_two(cluster, tmp_path):
    """``bench rollout --executor ray --nodes 1,2`` against the cluster: one JSON line, every
    rollout solved, per-node load that adds up."""
    r = subprocess.run(
        [*CLI, "bench", "rollout", "--executor", "ray", "--ray-address", cluster.ray.address,
         "--nodes", "1,2", "--n", str(N_TASKS), "--json", "--no-check", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["baseline"]["kind"] == "run" and result["failures"] == 0
    # the overhead target is checked on the most nodes (a loaded host may miss it: --no-check)
    assert result["overhead_s_p50"] == result["levels"][-1]["overhead_s_p50"] is not None
    missed = result["targets_missed"]
    assert missed == [] or missed[0].startswith("overhead_s_p50 <= 1.5 (got ")
    one, two = result["levels"]
    assert (one["nodes"], two["nodes"]) == (1, 2) and one["speedup"] == 1.0
    assert len(one["per_node"]) == 1 and len(two["per_node"]) == 2
    for level in (one, two):
        assert level["outcomes"] == {"solved": N_TASKS} and level["rollouts_per_min"] > 0
        assert sum(n["rollouts"] for n in level["per_node"].values()) == N_TASKS
        assert level["max_in_flight"] <= level["slots"] == SLOTS * level["nodes"]
        assert 0 < level["machine_cpu_util"] <= 1
        assert all(n["worker_cpu_s"] > 0 for n in level["per_node"].values())


def test_a_node_lost_mid_run_costs_no_rollout(cluster, tmp_path):
    """Kill node 1's raylet and workers while rollouts run there (its sandboxes exist)."""
    run_id = f"ray-loss-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "loss"
    proc = start_run(cluster, out, run_id, "--n-samples", "2")
    label = f"{LABEL}={run_id}"
    deadline = time.monotonic() + 240
    try:
        while not cluster.engine.containers(label):  # a rollout is in flight on node 1
            assert proc.poll() is None and time.monotonic() < deadline, "none ran on node 1"
            time.sleep(0.5)
        time.sleep(2)
        killed = cluster.ray.kill_node(1)
        assert killed
    except BaseException:
        reap(proc)
        raise
    t_kill = time.monotonic()
    printed = finish(proc, out, 600)
    recovery_s = time.monotonic() - t_kill
    records = results(out)
    keys = Counter((r["instance_id"], r["sample_index"]) for r in records)
    assert len(keys) == 2 * N_TASKS and set(keys.values()) == {1}  # each ends once
    assert printed["total"] == len(records)
    lost = [r for r in records if r.get("lost_attempts")]
    assert lost, "no rollout was in flight on the lost node"
    node1 = {a["node"] for r in lost for a in r["lost_attempts"]}
    assert len(node1) == 1
    for r in lost:
        (attempt,) = r["lost_attempts"]
        assert attempt["failure_kind"] == "infra" and attempt["infra_stage"] == "node_lost"
        assert attempt["engine"] == cluster.engine.host
        # retried once, on the other node, where it solved
        assert r["node"] not in node1 and r["reward"] == 1.0, r
        assert r["retries"] >= 1
    assert all(r["reward"] == 1.0 for r in records), [r["abort_reason"] for r in records]
    stats = json.loads((out / "summary.json").read_text())["executor"]
    assert [n["lost"] for n in stats["nodes"].values()].count(True) == 1
    print(f"node loss: {len(lost)} rollout(s) retried; run ended {recovery_s:.1f}s after the kill")
    # The dead node's sandboxes stay on its engine until a start there reaps them: their owner
    # (the killed worker process) is gone, so the pass every runtime start makes removes them;
    # `sandboxes gc --orphans` against that engine runs the same pass.
    assert containers(run_id) == []
    left = len(cluster.engine.containers(label))
    gc = subprocess.run(
        cluster.engine.command([*CLI, "sandboxes", "gc", "--orphans"]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gc.returncode == 0, gc.stderr
    print(
        f"node loss: {left} sandbox(es) of the dead worker reaped as orphans: {gc.stdout.strip()}"
    )
    assert cluster.engine.containers(label) == []
    # ... and the killed worker's artifact folder goes at the next worker start on the node
    assert any(d.name.startswith(WORKER_DIR) for d in reap_worker_dirs())
