"""The real Claude Code and Codex binaries edit a file on loopback through the adapter, driven by
the scripted CPU policy; their turns are recorded and later prompts extend earlier ones."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path

import pytest
from support.adapter_clients import recorded

from coding_agent_rl.model.parsers import format_tool_calls

pytestmark = pytest.mark.agents

RUN_TIMEOUT_S = 180


def quiet_env(home: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    env.update(extra)
    return env


async def run_cli(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"{argv[0]} timed out; stdout tail: {out[-3000:]!r} stderr: {err[-3000:]!r}")
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def assert_incremental(turns) -> None:
    """Every turn after the first continues its predecessor token-exactly."""
    assert len(turns) >= 3, [t.assistant for t in turns]
    assert turns[0].parent is None
    for prev, turn in itertools.pairwise(turns):
        assert turn.parent == prev.index, f"turn {turn.index} was rendered in full"
        head = prev.prompt_ids + prev.output_ids
        assert turn.prompt_ids[: len(head)] == head
        assert len(turn.prompt_ids) > len(head)
    for turn in turns:
        assert turn.output_ids and len(turn.output_logprobs) == len(turn.output_ids)
        assert all(lp <= 0 for lp in turn.output_logprobs)
        assert turn.finish_reason == "stop"


def edit_script(path: Path, shell_tool: str, arg: str) -> dict:
    """Think + shell call; text + shell call (written out, to check text survives the round
    trip through the CLI's history); final answer."""
    check = format_tool_calls([(shell_tool, {arg: f"cat {path}"})], "qwen25")
    return {
        "steps": [
            {"shell": f"sed -i 's/world/adapter/' {path}", "think": "Edit the greeting in place."},
            {"say": f"Checking the result.\n{check}"},
            {"say": "The greeting now says hello adapter."},
        ]
    }


def claude_env(home: Path, url: str, sid: str) -> dict[str, str]:
    return quiet_env(
        home,
        ANTHROPIC_BASE_URL=url,  # no /v1: the client appends /v1/messages itself
        ANTHROPIC_AUTH_TOKEN=sid,  # sent as "Authorization: Bearer <sid>"
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        ENABLE_TOOL_SEARCH="false",  # else most tools hide behind ToolSearch
        IS_SANDBOX="1",  # this test runs as root; bypassPermissions is refused otherwise
        ANTHROPIC_MODEL="policy",
        ANTHROPIC_SMALL_FAST_MODEL="policy",
        CLAUDE_CODE_SUBAGENT_MODEL="policy",
    )


def claude_argv(claude: Path, prompt: str) -> list[str]:
    return [
        str(claude),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "bypassPermissions",
        "--model",
        "policy",
    ]


def workspace(tmp_path: Path) -> tuple[Path, Path, Path]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    target = work / "greeting.txt"
    target.write_text("hello world\n")
    return work, home, target


async def test_real_claude_code_edits_a_file(tmp_path, scripted_stack, claude_binary):
    work, home, target = workspace(tmp_path)
    adapter, _policy, url = await scripted_stack(edit_script(target, "Bash", "command"))
    sid = "cc-session-1"
    adapter.sessions.open(sid, max_turns=20)
    argv = claude_argv(claude_binary, "Replace 'world' with 'adapter' in greeting.txt.")
    code, out, err = await run_cli(argv, work, claude_env(home, url, sid))
    assert code == 0, f"claude exited {code}: {err[-3000:]} {out[-3000:]}"
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    result = next(e for e in events if e.get("type") == "result")
    assert result.get("is_error") is False, result
    assert "hello adapter" in result.get("result", "")
    assert target.read_text() == "hello adapter\n"

    turns = await recorded(adapter, sid)
    assert [t.wire for t in turns] == ["anthropic"] * len(turns)
    assert_incremental(turns)
    first_call = turns[0].assistant["tool_calls"][0]["function"]
    assert first_call["name"] == "Bash"
    assert turns[0].assistant["reasoning_content"] == "Edit the greeting in place."
    assert turns[1].assistant["content"] == "Checking the result."
    # The `cat` result reached the model as a tool message.
    assert any(m["role"] == "tool" and "hello adapter" in m["content"] for m in turns[2].messages)


async def test_real_claude_code_subagent_turns_chain_separately(
    tmp_path, scripted_stack, claude_binary
):
    """A subagent's requests interleave with the main agent's: each conversation continues its
    own recorded turns, and the subagent's first turn starts a new chain (parent None)."""
    work, home, target = workspace(tmp_path)
    sed = format_tool_calls(
        [("Bash", {"command": f"sed -i 's/world/adapter/' {target}"})], "qwen25"
    )
    script = {
        # Only the subagent's own prompt has SUBTASK-7 outside the Agent call's JSON arguments.
        "rules": [
            {
                "match_prompt": '(?<!": ")SUBTASK-7',
                "steps": [{"shell": f"cat {target}"}, {"say": "SUB-DONE: it says hello world"}],
            }
        ],
        "steps": [
            {
                "tool": {
                    "name": "Agent",
                    "arguments": {
                        "description": "Read the file",
                        "prompt": "SUBTASK-7: print greeting.txt",
                        "subagent_type": "general-purpose",
                    },
                }
            },
            {"say": f"Now editing.\n{sed}"},
            {"say": "Edited."},
        ],
    }
    adapter, _policy, url = await scripted_stack(script)
    sid = "cc-subagent"
    adapter.sessions.open(sid, max_turns=30)
    argv = claude_argv(claude_binary, "Replace 'world' with 'adapter' in greeting.txt.")
    code, out, err = await run_cli(argv, work, claude_env(home, url, sid))
    assert code == 0, f"claude exited {code}: {err[-3000:]} {out[-3000:]}"
    assert target.read_text() == "hello adapter\n"

    turns = await recorded(adapter, sid)
    for turn in turns:
        if turn.parent is not None:
            parent = turns[turn.parent]
            head = parent.prompt_ids + parent.output_ids
            assert turn.prompt_ids[: len(head)] == head
    main_task = turns[0].messages[1]
    main = [t for t in turns if len(t.messages) > 1 and t.messages[1] == main_task]
    sub = [t for t in turns if t not in main]
    assert len(main) >= 3 and len(sub) >= 2
    assert all(t.parent in {m.index for m in main} for t in main[1:])
    assert sub[0].parent is None and "SUBTASK-7" in sub[0].messages[-1]["content"]
    assert all(t.parent in {s.index for s in sub} for t in sub[1:])
    assert main[1].assistant["content"] == "Now editing."  # text + tool_use in one reply
    # The subagent's answer reached the main agent (as a tool result or a task notification).
    assert any(
        "SUB-DONE" in m["content"] for t in main for m in t.messages[1:] if m["role"] != "assistant"
    )


async def test_real_claude_code_stops_promptly_at_the_turn_cap(
    tmp_path, scripted_stack, claude_binary
):
    """429 + x-should-retry: false makes Claude Code give up at once instead of retrying for
    minutes (measured: > 3 min without the header). Baseline: the same script run to its end
    (three turns) in the same test; the capped run (one turn, then the 429) takes less."""
    work, home, _ = workspace(tmp_path)
    adapter, _policy, url = await scripted_stack(
        {"steps": [{"shell": "echo 1"}, {"shell": "echo 2"}]}
    )
    clock = asyncio.get_running_loop().time
    adapter.sessions.open("cc-uncapped")
    started = clock()
    code, _, err = await run_cli(
        claude_argv(claude_binary, "count"), work, claude_env(home, url, "cc-uncapped")
    )
    uncapped = clock() - started
    assert code == 0 and len(await recorded(adapter, "cc-uncapped")) >= 3, err
    sid = "cc-capped"
    adapter.sessions.open(sid, max_turns=1)
    started = clock()
    code, out, _ = await run_cli(
        claude_argv(claude_binary, "count"), work, claude_env(home, url, sid)
    )
    capped = clock() - started
    assert capped < 2 * uncapped, (capped, uncapped)  # retrying would take minutes
    result = [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]
    assert code != 0 and result["is_error"] is True and result["api_error_status"] == 429
    assert "turn limit (1)" in result["result"]
    assert len(await recorded(adapter, sid)) == 1


async def test_real_codex_edits_a_file(tmp_path, scripted_stack, codex_binary):
    codex = codex_binary
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    # Codex's own sandbox refuses a CODEX_HOME under the temp dir, hence the bypass flag below.
    codex_home = home / ".codex"
    codex_home.mkdir()
    target = work / "greeting.txt"
    target.write_text("hello world\n")
    adapter, _policy, url = await scripted_stack(edit_script(target, "exec_command", "cmd"))
    sid = "codex-session-1"
    adapter.sessions.open(sid, max_turns=20)
    (codex_home / "config.toml").write_text(
        'model = "policy"\n'
        'model_provider = "carl"\n'
        "[model_providers.carl]\n"
        'name = "carl"\n'
        f'base_url = "{url}/v1"\n'
        'env_key = "CARL_SESSION"\n'
        'wire_api = "responses"\n'
        "[analytics]\nenabled = false\n"  # offline: no analytics, no plugin lookups
        "[features]\nplugins = false\n"
    )
    env = quiet_env(home, CODEX_HOME=str(codex_home), CARL_SESSION=sid)
    argv = [
        str(codex),
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "Replace 'world' with 'adapter' in greeting.txt.",
    ]
    code, out, err = await run_cli(argv, work, env)
    assert code == 0, f"codex exited {code}: {err[-3000:]} {out[-3000:]}"
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any(e.get("type") == "turn.completed" for e in events), out[-3000:]
    messages = [
        e["item"].get("text", "")
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]
    assert any("hello adapter" in m for m in messages), out[-3000:]
    assert target.read_text() == "hello adapter\n"

    turns = await recorded(adapter, sid)
    assert [t.wire for t in turns] == ["responses"] * len(turns)
    assert_incremental(turns)
    assert turns[0].assistant["tool_calls"][0]["function"]["name"] == "exec_command"
    assert turns[1].assistant["content"] == "Checking the result."
    assert any(m["role"] == "tool" and "hello adapter" in m["content"] for m in turns[2].messages)


@pytest.fixture(scope="session")
def gemini_cli() -> list[str]:
    """The pinned Node.js binary and Gemini CLI bundle from the harness cache (``npm pack`` on
    first use), as the harness runs them."""
    from coding_agent_rl.harness.cache import unpacked
    from coding_agent_rl.harness.gemini_cli import GeminiCli
    from coding_agent_rl.harness.node import NODE

    node = unpacked(NODE)["node"]
    bundle = unpacked(GeminiCli.package)["gemini-cli"]
    return [str(node), str(bundle / "gemini.js")]


async def test_real_gemini_cli_edits_a_file(tmp_path, scripted_stack, gemini_cli):
    """Gemini CLI over the Gemini wire format: its function calls run, it drops our thought parts
    from its history, and every later prompt still extends the stored tokens."""
    from coding_agent_rl.harness import HarnessContext, get_harness

    work, home, target = workspace(tmp_path)
    adapter, _policy, url = await scripted_stack(
        edit_script(target, "run_shell_command", "command")
    )
    sid = "gemini-session-1"
    adapter.sessions.open(sid, max_turns=20)
    harness = get_harness("gemini_cli", extra_args=[], extra_env={})
    ctx = HarnessContext(adapter_url=url, session_id=sid, model="policy", workdir=str(work))
    ((settings_path, settings),) = harness.config_files(ctx).items()
    assert settings_path.endswith("/.gemini/settings.json")
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(settings)
    argv = [*gemini_cli, *harness.argv(ctx, "Replace 'world' with 'adapter' in greeting.txt.")[2:]]
    code, out, err = await run_cli(argv, work, quiet_env(home, **harness.env(ctx)))
    assert code == 0, f"gemini exited {code}: {err[-3000:]} {out[-3000:]}"
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "result" and events[-1]["status"] == "success", events[-1]
    assert target.read_text() == "hello adapter\n"

    turns = await recorded(adapter, sid)
    assert [t.wire for t in turns] == ["gemini"] * len(turns)
    assert_incremental(turns)
    assert turns[0].assistant["reasoning_content"] == "Edit the greeting in place."
    assert all("reasoning_content" not in m for m in turns[1].messages)  # the CLI dropped it
    assert turns[1].assistant["content"] == "Checking the result."
    tool = [m for m in turns[2].messages if m["role"] == "tool"]
    assert tool and "hello adapter" in tool[-1]["content"]
    assert tool[-1]["name"] == "run_shell_command"


async def test_real_qwen_code_edits_a_file(tmp_path, scripted_stack):
    """Qwen Code over OpenAI Chat, run by the harness's pinned Node.js from the cache. (It
    refuses ``sed -i`` on a file it has not read: the edit goes through python instead.)"""
    from coding_agent_rl.harness import HarnessContext, get_harness
    from coding_agent_rl.harness.cache import unpacked
    from coding_agent_rl.harness.node import NODE
    from coding_agent_rl.harness.qwen_code import QwenCode

    node = unpacked(NODE)["node"]
    cli = unpacked(QwenCode.package)["qwen-code"] / "cli.js"
    work, home, target = workspace(tmp_path)
    script = edit_script(target, "run_shell_command", "command")
    script["steps"][0]["shell"] = (
        f"python3 -c \"import pathlib; p = pathlib.Path('{target}'); "
        "p.write_text(p.read_text().replace('world', 'adapter'))\""
    )
    adapter, _policy, url = await scripted_stack(script)
    sid = "qwen-session-1"
    adapter.sessions.open(sid, max_turns=20)
    harness = get_harness("qwen_code", extra_args=[], extra_env={})
    ctx = HarnessContext(adapter_url=url, session_id=sid, model="policy", workdir=str(work))
    ((settings_path, settings),) = harness.config_files(ctx).items()
    assert settings_path.endswith("/.qwen/settings.json")
    (home / ".qwen").mkdir()
    (home / ".qwen" / "settings.json").write_text(settings)
    argv = [
        str(node),
        str(cli),
        *harness.argv(ctx, "Replace 'world' with 'adapter' in greeting.txt.")[2:],
    ]
    code, out, err = await run_cli(argv, work, quiet_env(home, **harness.env(ctx)))
    assert code == 0, f"qwen exited {code}: {err[-3000:]} {out[-3000:]}"
    assert target.read_text() == "hello adapter\n"
    turns = await recorded(adapter, sid)
    assert {t.wire for t in turns} == {"chat"}
    assert_incremental(turns)
    assert turns[0].assistant["tool_calls"][0]["function"]["name"] == "run_shell_command"
