"""Every harness with its real CLI in a real Docker sandbox, through the adapter (bound on the
bridge gateway) to the scripted CPU policy: it edits a file as the non-root agent user, its turns
are recorded, overruns and crashes are reported, and nothing is left running."""

from __future__ import annotations

import json
import logging

import pytest

from coding_agent_rl.harness import HarnessContext, get_harness

pytestmark = [pytest.mark.docker, pytest.mark.agents]
log = logging.getLogger(__name__)

EDIT = {
    "steps": [
        {"shell": "sed -i 's/world/agent/' greeting.txt && id -un > whoami.txt"},
        {"say": "Done: the greeting now says hello agent."},
    ]
}
WORKDIR = "/work"
SLOW = "python3 -c 'import time; time.sleep(300)'"


def result_events(log_tail: str) -> list[dict]:
    """The stream-json ``result`` events in a log tail (its first line may be cut)."""
    events = []
    for line in log_tail.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "result":
            events.append(event)
    return events


async def setup(
    sandbox, stack, name: str, script: dict, *, sid: str, tmp_path, max_turns=20, **options
):
    adapter, url = await stack(script)
    adapter.sessions.open(sid, max_turns=max_turns)
    await sandbox.exec(
        f"mkdir -p {WORKDIR} && cd {WORKDIR} && git init -q && printf 'hello world\\n' > greeting.txt",
        check=True,
    )
    harness = get_harness(name, **{"extra_args": [], "extra_env": {}, **options})
    report = await harness.install(sandbox)
    log.warning("install %s: %s", name, report)
    ctx = HarnessContext(
        adapter_url=url, session_id=sid, model="policy", workdir=WORKDIR, log_dir=tmp_path / "logs"
    )
    await harness.configure(sandbox, ctx)
    return adapter, harness, ctx


async def agent_processes(sandbox) -> list[str]:
    res = await sandbox.exec("ps -u agent -o pid=,args= || true")
    return [line for line in res.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["claude_code", "codex", "opencode", "gemini_cli", "pi"])
async def test_agent_edits_a_file_through_the_adapter(name, sandbox, stack, tmp_path):
    sid = f"{name}-edit"
    adapter, harness, ctx = await setup(sandbox, stack, name, EDIT, sid=sid, tmp_path=tmp_path)
    run = await harness.run(sandbox, ctx, "Replace 'world' with 'agent' in greeting.txt.", 180)
    log.warning("%s run: %.1fs, exit %s", name, run.duration_s, run.exit_code)
    assert run.ok, run.log_tail
    assert await sandbox.read_file(f"{WORKDIR}/greeting.txt") == "hello agent\n"
    assert (await sandbox.read_file(f"{WORKDIR}/whoami.txt")).strip() == "agent"
    turns = adapter.sessions.turns(sid)
    assert len(turns) >= 2, [t.assistant for t in turns]
    assert all(t.output_ids for t in turns)
    # The log left the sandbox, and it stayed out of the workdir (so out of the diff).
    assert run.host_log_path is not None and run.host_log_path.stat().st_size > 0
    assert run.log_path.startswith("/opt/coding-agent-rl/run/")
    status = await sandbox.exec(f"git -C {WORKDIR} status --porcelain --ignored")
    assert sorted(status.stdout.split()) == ["??", "??", "greeting.txt", "whoami.txt"]
    assert await agent_processes(sandbox) == []


@pytest.mark.parametrize("name", ["claude_code", "codex", "opencode"])
async def test_budget_overrun_is_killed_and_reported(name, sandbox, stack, tmp_path):
    # The budget is relative to a baseline taken here: a whole short run of the same CLI (start,
    # two requests, one tool call). A CLI's start-up alone takes 1-20 s depending on the CLI and
    # the machine's load; a fixed budget ran out before the first request on a loaded host.
    _, quick, quick_ctx = await setup(
        sandbox, stack, name, EDIT, sid=f"{name}-base", tmp_path=tmp_path
    )
    baseline = await quick.run(sandbox, quick_ctx, "Replace 'world' with 'agent'.", budget_s=180)
    assert baseline.ok, baseline.log_tail
    # Under 100 s: opencode's shell tool gives up on a command after 120 s (so the slow step
    # comes three times: the run must still be inside one when the budget ends).
    budget = min(100.0, max(8.0, 1.5 * baseline.duration_s))
    # Not a bare `sleep`: Claude Code's Bash tool refuses standalone sleeps.
    script = {"steps": [{"shell": SLOW}] * 3 + [{"say": "never reached"}]}
    sid = f"{name}-overrun"
    adapter, harness, ctx = await setup(sandbox, stack, name, script, sid=sid, tmp_path=tmp_path)
    run = await harness.run(sandbox, ctx, "Wait a long time.", budget_s=budget)
    assert run.timed_out and run.exit_code is None, run.log_tail
    # Killed at the budget, not long after: the kill is one exec, well inside a baseline run.
    assert budget <= run.duration_s < budget + max(4.0, baseline.duration_s)
    assert len(adapter.sessions.turns(sid)) >= 1  # it was inside a slow tool call
    assert await agent_processes(sandbox) == []
    assert "time.sleep" not in (await sandbox.exec("ps -eo args=")).stdout


async def test_claude_code_runs_as_root_when_asked(sandbox, stack, tmp_path):
    # Root needs IS_SANDBOX=1 for bypassPermissions; the harness sets it only then.
    adapter, url = await stack(EDIT)
    adapter.sessions.open("cc-root", max_turns=20)
    await sandbox.exec(f"mkdir -p {WORKDIR} && printf 'hello world\\n' > {WORKDIR}/greeting.txt")
    harness = get_harness("claude_code", extra_args=[], extra_env={})
    await harness.install(sandbox)
    ctx = HarnessContext(
        adapter_url=url, session_id="cc-root", model="policy", workdir=WORKDIR, user="root"
    )
    await harness.configure(sandbox, ctx)
    run = await harness.run(sandbox, ctx, "Replace 'world' with 'agent' in greeting.txt.", 120)
    assert run.ok, run.log_tail
    assert (await sandbox.read_file(f"{WORKDIR}/whoami.txt")).strip() == "root"
    assert run.host_log_path is None  # no log_dir given: nothing copied


async def test_claude_code_turn_cap_429_is_a_reported_crash(sandbox, stack, tmp_path):
    # The adapter answers 429 once the session's turn cap is reached; the CLI gives up.
    adapter, harness, ctx = await setup(
        sandbox, stack, "claude_code", EDIT, sid="cc-429", tmp_path=tmp_path, max_turns=1
    )
    run = await harness.run(sandbox, ctx, "Replace 'world' with 'agent' in greeting.txt.", 120)
    assert run.exit_code not in (0, None) and not run.timed_out
    result = result_events(run.log_tail)
    assert result and result[-1]["is_error"], run.log_tail[-2000:]
    assert result[-1]["api_error_status"] == 429
    assert len(adapter.sessions.turns("cc-429")) == 1
    assert await agent_processes(sandbox) == []


async def test_gemini_cli_turn_cap_429_is_final(sandbox, stack, tmp_path):
    """Gemini CLI ignores ``x-should-retry``; the turn cap's 429 must still end it at once
    (without the ``limit: 0`` in its message the CLI retries it for minutes)."""
    adapter, harness, ctx = await setup(
        sandbox, stack, "gemini_cli", EDIT, sid="gem-429", tmp_path=tmp_path, max_turns=1
    )
    run = await harness.run(sandbox, ctx, "Replace 'world' with 'agent' in greeting.txt.", 150)
    assert run.exit_code not in (0, None) and not run.timed_out, run.log_tail[-2000:]
    # One refusal, no retries (which back off 5, 10, 20, 30, 30... s): it gave up at once.
    assert run.log_tail.count("TerminalQuotaError:") == 1, run.log_tail[-3000:]
    assert len(adapter.sessions.turns("gem-429")) == 1
    assert await agent_processes(sandbox) == []


@pytest.mark.parametrize(
    "name,flag",
    [
        ("claude_code", "--no-such-flag"),
        ("codex", "--no-such-flag"),
        ("gemini_cli", "--bogus-flag"),
    ],
)
async def test_a_bad_flag_crash_is_reported_with_the_log_tail(name, flag, sandbox, stack, tmp_path):
    adapter, harness, ctx = await setup(
        sandbox, stack, name, EDIT, sid=f"{name}-bad", tmp_path=tmp_path, extra_args=[flag]
    )
    run = await harness.run(sandbox, ctx, "anything", 60)
    assert run.exit_code not in (0, None) and not run.timed_out
    assert flag.lstrip("-") in run.log_tail  # yargs (Gemini CLI) names it without dashes
    assert run.host_log_path.read_text() == run.log_tail
    assert adapter.sessions.turns(f"{name}-bad") == []
