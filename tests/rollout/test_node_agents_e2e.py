"""``coding-agent-rl run --agent gemini_cli | qwen_code`` end to end: the real CLIs (Node.js
bundles and the Node.js binary from the pinned npm tarballs, bind-mounted read-only) in Docker
sandboxes, reaching only the adapter (adapter-only isolation), to the CPU policy servers — Gemini
CLI through the Gemini wire format, Qwen Code and pi through OpenAI Chat. The replay policy applies
the gold patch through each CLI's own shell tool and solves the task (pi: every bundled task); a
policy that gives up scores 0. The runs go concurrently."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from support.rollout_helpers import GIVE_UP, TASKS, containers, reap, task_rule, write_script
from test_run_e2e import CLI, check_run, finish, start

from coding_agent_rl.types import Sample

pytestmark = [pytest.mark.docker, pytest.mark.agents]


@pytest.fixture(scope="module")
def node_runs(rows, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("node-agents")
    give_up = write_script(tmp / "give_up.json", [task_rule(rows["slugify"], GIVE_UP)])
    outs = {name: tmp / name for name in ("replay", "give_up", "qwen", "pi", "pi_give_up")}
    agent = ["--agent", "gemini_cli"]
    t0 = time.monotonic()
    procs = {
        # Gemini CLI and Qwen Code on every bundled task; Gemini CLI giving up on one.
        "replay": start(outs["replay"], "--policy", "replay", *agent, "--concurrency", "2"),
        "give_up": start(outs["give_up"], "--policy", give_up, *agent, "--limit", "1"),
        "qwen": start(
            outs["qwen"], "--policy", "replay", "--agent", "qwen_code", "--concurrency", "2"
        ),
        # pi on every bundled task, and giving up on one.
        "pi": start(outs["pi"], "--policy", "replay", "--agent", "pi", "--concurrency", "3"),
        "pi_give_up": start(
            outs["pi_give_up"], "--policy", give_up, "--agent", "pi", "--limit", "1"
        ),
    }
    try:
        printed = {name: finish(p, outs[name], 900) for name, p in procs.items()}
    finally:
        for p in procs.values():
            reap(p)
    return {"out": outs, "printed": printed, "wall": time.monotonic() - t0}


def test_gemini_cli_replay_solves_every_task_and_give_up_scores_zero(node_runs):
    out = node_runs["out"]
    solved, samples = check_run(out["replay"], node_runs["printed"]["replay"], 6)
    assert [r["reward"] for r in solved] == [1.0] * 6, solved
    for record in solved:
        assert record["agent"] == "gemini_cli", record
        # The gold patch went through Gemini CLI's shell tool, as Gemini function calls.
        log = (out["replay"] / record["artifacts"]["agent_log"]).read_text()
        events = [json.loads(x) for x in log.splitlines() if x.startswith('{"type"')]
        uses = [e for e in events if e["type"] == "tool_use"]
        assert uses and all(e["tool_name"] == "run_shell_command" for e in uses), log[-2000:]
        assert events[-1]["type"] == "result" and events[-1]["status"] == "success"
    final = [s for s in samples if s.metadata["segment"] == "final"]
    assert len(final) == 6 and all(isinstance(s, Sample) for s in final)

    (gave_up,), _ = check_run(out["give_up"], node_runs["printed"]["give_up"], 1)
    assert gave_up["reward"] == 0.0 and gave_up["failure_kind"] == "model", gave_up
    assert gave_up["fail_reason"] == "empty diff"
    assert containers() == []


def test_qwen_code_replay_solves_every_task(node_runs):
    out = node_runs["out"]["qwen"]
    solved, _ = check_run(out, node_runs["printed"]["qwen"], 6)
    assert [r["reward"] for r in solved] == [1.0] * 6, solved
    for record in solved:
        assert record["agent"] == "qwen_code", record
        log = (out / record["artifacts"]["agent_log"]).read_text()
        assert '"name":"run_shell_command"' in log  # the patch went through its shell tool


def test_pi_replay_solves_every_task_and_give_up_scores_zero(node_runs):
    out = node_runs["out"]
    solved, _ = check_run(out["pi"], node_runs["printed"]["pi"], 6)
    assert [r["reward"] for r in solved] == [1.0] * 6, solved
    for record in solved:
        assert record["agent"] == "pi" and record["agent_cpu_s"] > 0, record
        assert record["isolation"]["agent_network"] == "adapter-only"  # it reached the adapter only
        log = (out["pi"] / record["artifacts"]["agent_log"]).read_text()
        events = [json.loads(x) for x in log.splitlines() if x.startswith('{"type"')]
        calls = [e["toolName"] for e in events if e["type"] == "tool_execution_start"]
        assert calls and set(calls) == {"bash"}, log[-2000:]  # through pi's own bash tool

    (gave_up,), _ = check_run(out["pi_give_up"], node_runs["printed"]["pi_give_up"], 1)
    assert gave_up["reward"] == 0.0 and gave_up["failure_kind"] == "model", gave_up
    assert gave_up["fail_reason"] == "empty diff"


def test_gemini_cli_replay_solves_on_the_local_backend(tmp_path):
    """The same CLI on the local (bubblewrap) backend: its Node.js and bundle folder are bound
    read-only into the sandbox the same way."""
    from coding_agent_rl.sandbox.local import bwrap_reason

    if reason := bwrap_reason():
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
    out = tmp_path / "local"
    out.mkdir()
    args = ["run", "--sandbox", "local", "--dataset", str(TASKS), "--policy", "replay"]
    args += ["--agent", "gemini_cli", "--limit", "1", "--agent-budget", "300", "--out", str(out)]
    with (tmp_path / "local.log").open("w") as log:
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=log, text=True)
    printed = finish(proc, out, 600)
    (solved,), _ = check_run(out, printed, 1)
    assert solved["reward"] == 1.0 and solved["agent"] == "gemini_cli", solved
