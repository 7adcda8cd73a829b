"""Every behaviour the rollout pipeline shares, over both acts, through slime's two entry points
exactly as a trainer calls them: the CLI act (Claude Code through the adapter,
``coding_agent_rl.generate.generate``) and the native act (the interaction loop,
``coding_agent_rl.generate_native.generate`` with the coding environment). The settings come from
the environment, as under slime: ``CODING_AGENT_RL_TAMPER_POLICY``, ``..._TAMPER_REWARD``,
``..._SANDBOX_OPTIONS`` (limits), ``..._PROMPT``, ``..._OUT_DIR``. Real Docker, the real CLI, the
scripted CPU policy behind a real /generate server, slime's own abort flag."""

from __future__ import annotations

import asyncio
import importlib
import json
import pathlib

import pytest
from support.rollout_helpers import (
    EXAMPLES,
    RUN_ID,
    containers,
    dataset_lines,
    solve_steps,
    title,
)
from support.slime_vendor import fresh_state, slime_args

from coding_agent_rl.policy.scripted import ScriptedPolicy
from coding_agent_rl.policy.server import PolicyServer
from coding_agent_rl.tokenizer import qwen3_tokenizer_dir
from coding_agent_rl.types import Sample, Status

pytestmark = [pytest.mark.docker, pytest.mark.agents]

ENTRIES = {"cli": "coding_agent_rl.generate", "native": "coding_agent_rl.generate_native"}
MARKER = "PIPELINE-PROMPT-MARKER"
PIDS = 321
# A solve that also reaches into the test framework: a static tamper-screen finding, which the
# "flag" policy only records.
SCREENED = "cd /testbed && printf 'import _pytest  # noqa\\n' >> textkit/__init__.py"
# No fix, and pytest's failing exit status forced to 0 at exit: tampering evidence from the run,
# scored with the tamper reward.
FORGE_EXIT = (
    "printf 'import atexit, os\\natexit.register(lambda: os._exit(0))\\n' >> pager/__init__.py"
)
LIMITS = [
    {
        "shell": "cd /testbed && cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max"
        f" > LIMITS.txt; {FORGE_EXIT}"
    },
    {"say": "Done."},
]
# Not a bare `sleep`: a CLI may refuse or background one.
SLOW = [{"shell": "python3 -c 'import time; time.sleep(120)'"}, {"say": "Done."}]
SAMPLING = {"temperature": 1.0, "max_new_tokens": 2048}


def script(rows) -> dict:
    """Each task's rule, keyed on the custom prompt's marker (a prompt without it gives up)."""
    solve = [*solve_steps(rows["slugify"])[:-1], {"shell": SCREENED}, {"say": "Fixed."}]
    rules = [
        {"match_prompt": f"{MARKER} .*{title(rows['slugify'])}", "steps": solve},
        {"match_prompt": f"{MARKER} .*{title(rows['pager'])}", "steps": LIMITS},
        {"match_prompt": f"{MARKER} .*{title(rows['editor'])}", "steps": SLOW},
    ]
    return {"rules": rules, "final": "I give up."}


def sample(name: str, index: int, image: str | None = None) -> Sample:
    line = dataset_lines()[name]
    metadata = json.loads(json.dumps(line["metadata"]))
    if image is not None:
        metadata["image"] = image
    return Sample(
        group_index=index, index=index, prompt=line["prompt"], label=line["label"],
        metadata=metadata, session_id=f"pipeline-{index}",
    )  # fmt: skip


@pytest.fixture(params=sorted(ENTRIES))
async def entry(request, rows, tmp_path, monkeypatch):
    """(act, entry module, slime args, output folder) with the settings in the environment."""
    act = request.param
    server = PolicyServer(ScriptedPolicy(script(rows)), "qwen3", "qwen3_coder")
    url = await server.start("127.0.0.1", 0)
    config = tmp_path / "native.yaml"
    config.write_text("max_turns: 12\nrollout_interaction_env_path: coding_agent_rl.env.coding\n")
    args = slime_args(  # slime's own parser defaults, then this launch's flags
        hf_checkpoint=str(qwen3_tokenizer_dir()),
        sglang_router_ip="127.0.0.1",
        sglang_router_port=int(url.rsplit(":", 1)[1]),
        rollout_max_context_len=32768,
        rollout_max_response_len=4096,
        sglang_tool_call_parser="qwen3_coder",
        sglang_reasoning_parser="qwen3",
        custom_config_path=str(config),
    )
    out = tmp_path / "out"
    env = {
        "SWE_AGENT": "claude_code" if act == "cli" else "native",
        "CODING_AGENT_RL_DATASET_DIR": str(EXAMPLES),
        "SWE_AGENT_TIME_BUDGET_SEC": "200",
        "SWE_EVAL_TIMEOUT_SEC": "120",
        "CODING_AGENT_RL_TAMPER_POLICY": "flag",
        "CODING_AGENT_RL_TAMPER_REWARD": "-1",
        "CODING_AGENT_RL_SANDBOX_OPTIONS": json.dumps({"pids": PIDS, "run_id": RUN_ID}),
        "CODING_AGENT_RL_PROMPT": f"{MARKER} $workdir $problem_statement",
        "CODING_AGENT_RL_OUT_DIR": str(out),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    module = importlib.import_module(ENTRIES[act])
    for name in ("_runtime", "_runtime_lock", "_writer", "_states", "_lock"):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, {} if name == "_states" else None)
    try:
        yield act, module, args, out
    finally:
        runtime = getattr(module, "_runtime", None)
        if runtime is not None:
            await runtime.stop()
        for state in (getattr(module, "_states", None) or {}).values():
            await state.client.close()
        await server.stop()


def record_of(s) -> dict:
    return s.metadata.get("rollout_record") or {}


def one(out) -> Sample:
    """The rollout's one sample (a list of siblings, or the sample itself)."""
    (s,) = out if isinstance(out, list) else [out]
    keys = ("failure_kind", "fail_reason", "abort_reason", "rollout_reward")
    print(s.index, s.reward, {k: s.metadata.get(k) for k in keys}, record_of(s))  # on failure
    return s


async def test_shared_behaviour_over_both_acts(entry):
    act, module, args, out = entry
    solved, limited, broken = await asyncio.gather(
        module.generate(args, sample("slugify", 0), dict(SAMPLING)),
        module.generate(args, sample("pager", 1), dict(SAMPLING)),
        module.generate(args, sample("money", 2, image="coding-agent-rl/no-such-image:0"), {}),
    )
    solved, limited, broken = one(solved), one(limited), one(broken)
    # The prompt setting, and the tamper policy: "flag" records the screen's finding only.
    r = record_of(solved)
    assert solved.reward == 1.0 and r["reward"] == 1.0 and r["failure_kind"] is None, r
    assert any("_pytest" in f for f in r["screen_findings"]) and not r["tampering"], r
    # The tamper reward, and limits and isolation: the option reached the agent's sandbox (the agent read its pids.max)
    # and the record says what applied.
    r = record_of(limited)
    assert r["failure_kind"] == "model" and limited.reward == r["reward"] == -1.0, r
    assert any("exited 0" in t for t in r["tampering"]), r
    diff = (out / r["artifacts"]["diff"]).read_text()
    assert f"+{PIDS}" in diff, diff
    assert r["isolation"]["limits"]["pids"] == PIDS
    assert r["isolation"]["agent_network"] == ("adapter-only" if act == "cli" else "none")
    assert r["isolation"]["grading_network"] == "none"
    # Artifacts: the same three files on both paths, under the output folder.
    for s in (solved, limited):
        arts = record_of(s)["artifacts"]
        for name in ("diff", "test_log", "agent_log"):
            assert (out / arts[name]).is_file() and (out / arts[name]).stat().st_size > 0, arts
    # Infra attribution: a task image that does not exist is the sandbox's failure, retried.
    r = record_of(broken)
    assert broken.status == Status.ABORTED and broken.remove_sample
    assert (r["failure_kind"], r["infra_stage"], r["retries"]) == ("infra", "sandbox", 1), r
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(x["sample_index"] for x in results) == [0, 1, 2]
    # The trainer's abort mid-rollout: an aborted placeholder, its sandboxes destroyed.
    state = fresh_state(args)
    task = asyncio.ensure_future(module.generate(args, sample("editor", 3), dict(SAMPLING)))
    try:
        for _ in range(600):
            await asyncio.sleep(0.1)
            if containers():
                break
        await asyncio.sleep(3.0)  # the agent is in its two-minute step
        state.aborted = True
        aborted = one(await asyncio.wait_for(task, 60))
    finally:
        state.reset()
    assert aborted.status == Status.ABORTED and aborted.remove_sample
    assert aborted.metadata["failure_kind"] == "aborted"
    assert containers() == []
    assert pathlib.Path(out).is_dir()
