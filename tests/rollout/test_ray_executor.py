"""The Ray executor's parts that need no cluster: artifacts shipped within a budget, the node's
own settings over the driver's, the registry and the command line's errors, the slot nodes read
from ``ray.nodes()``, the folders of dead workers reaped. (The cluster itself:
test_ray_cluster.py.)"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from coding_agent_rl import settings
from coding_agent_rl.errors import UserError
from coding_agent_rl.rollout.executor import EXECUTORS, InProcessExecutor, create_executor
from coding_agent_rl.rollout.ray_executor import (
    SLOTS,
    NodeWorker,
    RayExecutor,
    plan_rows,
    slot_nodes,
)
from coding_agent_rl.rollout.ray_worker import WORKER_DIR, node_settings, reap_worker_dirs
from coding_agent_rl.rollout.runtime import RuntimeConfig
from coding_agent_rl.rollout.shipping import artifact_paths, pack, unpack

CLI = [sys.executable, "-m", "coding_agent_rl.cli"]


def test_artifacts_travel_within_the_budget_keeping_each_log_tail(tmp_path):
    worker, driver = tmp_path / "worker", tmp_path / "driver"
    art = worker / "rollouts" / "t__0"
    art.mkdir(parents=True)
    (art / "diff.patch").write_text("diff --git a/x b/x\n")
    (art / "test_log.txt").write_bytes(b"head " * 100 + b"THE END")
    (art / "claude.log").write_bytes(b"x" * 50)
    record = {
        "artifacts": {"diff": "rollouts/t__0/diff.patch", "test_log": "rollouts/t__0/test_log.txt"}
    }
    paths = artifact_paths(record, art, worker)
    assert paths[:2] == ["rollouts/t__0/diff.patch", "rollouts/t__0/test_log.txt"]  # named first
    assert paths[2:] == ["rollouts/t__0/claude.log"]

    files, cut = pack(worker, paths, 1 << 20)  # everything fits
    assert cut == [] and sum(map(len, files.values())) == 19 + 507 + 50
    unpack(driver, files)
    assert (driver / "rollouts/t__0/test_log.txt").read_bytes().endswith(b"THE END")

    files, cut = pack(worker, paths, 19 + 100)  # the diff fits, the log keeps its last 100 bytes
    assert cut == ["rollouts/t__0/test_log.txt", "rollouts/t__0/claude.log"]
    assert files["rollouts/t__0/diff.patch"] == b"diff --git a/x b/x\n"
    assert files["rollouts/t__0/test_log.txt"].endswith(b"THE END")
    assert len(files["rollouts/t__0/test_log.txt"]) == 100
    assert "rollouts/t__0/claude.log" not in files  # the budget is spent


def test_a_shipped_path_cannot_leave_the_output_folder(tmp_path):
    with pytest.raises(ValueError, match="leaves the output folder"):
        unpack(tmp_path / "out", {"../escape.txt": b"x"})
    assert not (tmp_path / "escape.txt").exists()
    files, _ = pack(tmp_path, ["../../etc/passwd"], 1 << 20)
    assert files == {}


def test_a_worker_keeps_the_drivers_settings_but_its_own_engine(monkeypatch, tmp_path):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    driver = settings.load(agent_budget_s=90, out_dir=tmp_path, sandbox_options={"memory": "8g"})
    monkeypatch.setenv("DOCKER_HOST", "unix:///tmp/node2.sock")  # the node's `ray start` env
    monkeypatch.setenv("SWE_AGENT_TIME_BUDGET_SEC", "5")  # not the node's to decide
    node = node_settings(driver.model_dump(mode="json"), settings.load())
    assert node.docker_host == "unix:///tmp/node2.sock"
    assert node.agent_budget_s == 90 and node.out_dir == tmp_path
    assert node.sandbox_options == {"memory": "8g"}


def test_slot_nodes_are_the_live_ones_advertising_the_resource():
    nodes = [
        {"NodeID": "b" * 56, "Alive": True, "Resources": {SLOTS: 4.0, "CPU": 2.0}},
        {"NodeID": "a" * 56, "Alive": True, "Resources": {SLOTS: 2.0}},
        {"NodeID": "c" * 56, "Alive": False, "Resources": {SLOTS: 8.0}},
        {"NodeID": "d" * 56, "Alive": True, "Resources": {"CPU": 16.0}},  # a trainer node
    ]
    assert slot_nodes(nodes) == [("a" * 56, 2), ("b" * 56, 4)]


def test_the_pools_plan_keeps_each_group_on_one_node_and_loads_nodes_by_slots():
    from coding_agent_rl.datasets.schema import TaskRow

    def row(name: str) -> TaskRow:
        return TaskRow(instance_id=name, image="img", workdir="/w", problem_statement="fix")

    small, big = NodeWorker("n1", 1, None), NodeWorker("n2", 3, None)
    rows = [row(t) for t in "aabbccdd"]  # four groups of two, in the order they will run
    plan = plan_rows(rows, [small, big])
    on = {n: [r.instance_id for r in rs] for n, rs in plan.items()}
    # A group stays together and in order; the 3-slot node plans three groups, the 1-slot one.
    assert on == {"n1": ["a", "a"], "n2": ["b", "b", "c", "c", "d", "d"]}
    assert plan_rows(rows, []) == {}


async def test_a_nodes_pool_hears_its_rows_a_few_ahead_then_one_per_finished_rollout():
    """Rows cross to a node only when near: ``TELL_AHEAD`` per slot at first, then one as each
    of its rollouts ends (a large dataset is not shipped to every node up front)."""
    import asyncio
    import types

    from coding_agent_rl.datasets.schema import TaskRow
    from coding_agent_rl.rollout import ray_executor

    heard: dict[str, list[str]] = {"n1": [], "n2": []}

    def actor(node: str) -> types.SimpleNamespace:
        def remote(rows: list[TaskRow]) -> asyncio.Future[None]:
            heard[node] += [r.instance_id for r in rows]
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done

        return types.SimpleNamespace(expect=types.SimpleNamespace(remote=remote))

    ex = RayExecutor(RuntimeConfig(policy="replay"))
    ex.workers = [NodeWorker("n1", 1, actor("n1")), NodeWorker("n2", 1, actor("n2"))]
    rows = [
        TaskRow(instance_id=f"t{i}", image="img", workdir="/w", problem_statement="fix")
        for i in range(10)
    ]
    ex.expect(rows)
    await asyncio.sleep(0)
    ahead = ray_executor.TELL_AHEAD
    assert [len(v) for v in heard.values()] == [ahead, ahead]
    assert heard["n1"] == ["t0", "t2", "t4", "t6", "t8"][:ahead]  # tasks alternate by load
    ex._tell(ex.workers[0], 1)  # one of n1's rollouts ended
    assert heard["n1"] == ["t0", "t2", "t4", "t6", "t8"][: ahead + 1]
    assert ex._planned["t3"] == "n2"


def test_executors_are_registered_by_name():
    assert EXECUTORS.names() == ["in-process", "ray"]
    config = RuntimeConfig(policy="replay")
    assert isinstance(create_executor("in-process", config), InProcessExecutor)
    with settings.using(settings.load(ray_address="127.0.0.1:1", ray_artifact_budget=7)):
        ray = create_executor("ray", config, concurrency=3)
    assert isinstance(ray, RayExecutor)
    assert ray.address == "127.0.0.1:1" and ray.artifact_budget == 7
    with pytest.raises(UserError, match="unknown executor 'dask'"):
        create_executor("dask", config)


def test_dead_workers_folders_are_reaped_live_ones_kept(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = tmp_path / f"{WORKER_DIR}{os.getpid()}-abc"
    gone = tmp_path / f"{WORKER_DIR}{dead.pid}-xyz"
    for d in (mine, gone):
        (d / "rollouts").mkdir(parents=True)
    assert reap_worker_dirs(tmp_path) == [gone]
    assert mine.is_dir() and not gone.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--executor", "dask"], "--executor 'dask': expected one of in-process, ray"),
        (["--ray-address", "127.0.0.1:6379"], "--ray-address applies to --executor ray only"),
    ],
)
def test_run_refuses_a_bad_executor_in_one_line(tmp_path, extra, message):
    tasks = pathlib.Path(__file__).parents[2] / "coding_agent_rl/datasets/examples/tasks.jsonl"
    r = subprocess.run(
        [
            *CLI,
            "run",
            "--dataset",
            str(tasks),
            "--policy",
            "replay",
            "--out",
            str(tmp_path),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
