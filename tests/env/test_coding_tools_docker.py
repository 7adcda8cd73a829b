"""The coding environment's tools in real Docker, driven through ``CodingEnv.step`` with the text a
policy would emit: what they do, their bounds, and the attacks they must stop (each shown to
succeed with the defence turned off)."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from support.rollout_helpers import RUN_ID, containers

from coding_agent_rl.env import editor
from coding_agent_rl.env.coding import CodingEnv, CodingEnvConfig
from coding_agent_rl.env.tools import ToolLimits
from coding_agent_rl.grading import workspace
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.native import native_network, native_sandbox_options, setup_agent_user
from coding_agent_rl.rollout.sandboxes import FreshSandboxes

pytestmark = [pytest.mark.docker]


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


class SandboxedEnv(CodingEnv):
    """The coding env on a sandbox prepared as the rollout pipeline prepares the native act's
    (created, workspace set up, the repository handed to the agent user); destroyed on close."""

    async def reset(self):
        config = RolloutConfig(sandbox_options={"run_id": RUN_ID})
        opts = native_sandbox_options(config, native_network(config.backend), self.row)
        self.sb = await FreshSandboxes().acquire(config.backend, self.row.image, opts)
        base = await workspace.prepare_agent_workspace(self.sb, self.row)
        await setup_agent_user(self.sb, self.config.user, self.row.workdir)
        obs, info = await super().reset()
        return obs, {**info, "base_commit": base}

    async def close(self):
        await super().close()
        if self.sb is not None:
            await self.sb.close()


def env_for(row, **config) -> CodingEnv:
    return SandboxedEnv(row, CodingEnvConfig(**config), prompt="Fix the bug.")


async def bash(env: CodingEnv, command: str, **extra) -> tuple[str, dict]:
    obs, done, info = await env.step(call("bash", command=command, **extra))
    assert not done
    return obs["obs_str"], info


@pytest.fixture
async def env(rows):
    e = env_for(rows["slugify"])
    await e.reset()
    yield e
    await e.close()
    assert containers() == []


async def test_reset_gives_the_prompt_and_tools(rows):
    e = env_for(rows["slugify"])
    try:
        (obs, info) = await e.reset()
        assert [m["role"] for m in obs["messages"]] == ["system", "user"]
        assert obs["messages"][1]["content"] == "Fix the bug."
        assert [t["function"]["name"] for t in obs["tools"]] == ["bash", "file_editor", "submit"]
        assert len(info["base_commit"]) == 40
    finally:
        await e.close()


async def test_bash_runs_as_the_agent_in_the_repo(env):
    out, info = await bash(env, "id -un; pwd; echo $HOME; echo err >&2; exit 3")
    assert out.splitlines()[:4] == ["agent", "/testbed", "/home/agent", "err"]
    assert out.endswith("[exit code 3]") and info == {"tools": ["bash"], "submitted": False}


async def test_bash_output_and_time_are_bounded(rows):
    e = env_for(rows["slugify"], limits=ToolLimits(max_output_chars=2000, bash_max_timeout_s=3))
    await e.reset()
    try:
        out, _ = await bash(e, "yes 0123456789 | head -c 5000000")
        assert len(out) < 2200 and "characters omitted" in out and out.endswith("[exit code 0]")
        t0 = time.monotonic()
        await bash(e, "true")
        one_call = time.monotonic() - t0  # this machine's cost of a tool call, now
        t0 = time.monotonic()
        out, _ = await bash(e, "sleep 61 & setsid sleep 62 & sleep 63; echo never", timeout=600)
        assert "timed out after 3 s" in out and "never" not in out
        # The 3 s bound, not the sleeps (61 s and more): killing the group and reading what is
        # left cost a few more calls on a loaded host.
        assert time.monotonic() - t0 < 3 + 10 * one_call + 20
        left, _ = await bash(e, "ps -u agent -o comm= | grep -c sleep || true")
        assert left.splitlines()[0] == "0"  # its group killed, and what escaped it (setsid)
    finally:
        await e.close()


async def test_file_editor(env):
    edit = "file_editor"
    obs, _, _ = await env.step(
        call(edit, command="view", path="textkit/slug.py", view_range=[1, 3])
    )
    assert obs["obs_str"].startswith("     1\t")
    assert len(obs["obs_str"].splitlines()) == 3
    obs, _, _ = await env.step(
        call(edit, command="create", path="notes/a.txt", file_text="one\ntwo\n")
    )
    assert obs["obs_str"] == "Created /testbed/notes/a.txt."
    obs, _, _ = await env.step(call(edit, command="create", path="notes/a.txt", file_text="x"))
    assert obs["obs_str"].startswith("Error: cannot write")  # create never overwrites
    obs, _, _ = await env.step(
        call(edit, command="str_replace", path="notes/a.txt", old_str="two", new_str="2")
    )
    assert "Edited /testbed/notes/a.txt" in obs["obs_str"] and "\t2" in obs["obs_str"]
    obs, _, _ = await env.step(
        call(edit, command="insert", path="notes/a.txt", insert_line=0, new_str="zero")
    )
    assert obs["obs_str"].startswith("Inserted")
    out, _ = await bash(env, "cat notes/a.txt; stat -c %U notes/a.txt")
    assert out.splitlines()[:4] == ["zero", "one", "2", "agent"]
    for args, words in [
        ({"command": "str_replace", "path": "notes/a.txt", "old_str": "nope"}, "not found"),
        ({"command": "insert", "path": "notes/a.txt", "insert_line": 99, "new_str": "x"}, "0..3"),
        ({"command": "view", "path": "missing.py"}, "does not exist"),
        ({"command": "delete", "path": "a"}, "must be one of"),
    ]:
        obs, _, _ = await env.step(call(edit, **args))
        assert obs["obs_str"].startswith("Error:") and words in obs["obs_str"], obs
    big = "x" * 200_000  # over one command line: staged through a root-owned folder
    obs, _, _ = await env.step(call(edit, command="create", path="big.txt", file_text=big))
    assert obs["obs_str"] == "Created /testbed/big.txt."
    out, _ = await bash(env, "wc -c < big.txt; ls -A /tmp/.car-editor | wc -l")
    assert out.splitlines()[:2] == ["200000", "0"]


async def test_ill_formed_and_unknown_calls_are_observations(env):
    obs, done, info = await env.step(
        '<tool_call>\n{"name": "bash", "arguments": {oops}\n</tool_call>'
    )
    assert not done and info == {"ill_formed": True}
    assert obs["obs_str"].startswith("Error: ill-formed tool call")
    obs, done, _ = await env.step(call("Bash", command="ls"))
    assert not done and "unknown tool 'Bash'" in obs["obs_str"]
    obs, done, info = await env.step("I am done.")
    assert done and info["submitted"] is False  # a reply without a tool call ends, like a CLI
    obs, done, info = await env.step(call("bash", command="touch a") + "\n" + call("submit"))
    assert done and info == {"tools": ["bash", "submit"], "submitted": True}
    messages = env.format_observation(obs)
    assert [m["role"] for m in messages] == ["tool", "tool"]


# ---- attacks --------------------------------------------------------------------------------


async def test_the_policy_cannot_touch_root_owned_files(rows, monkeypatch):
    """Tools run as the unprivileged agent: replacing the git binary the harness runs as root
    (at diff capture) fails. Defence off (tools as root): it succeeds."""
    attack = "cp /bin/true /usr/bin/git && echo REPLACED"
    for user, replaced in (("agent", False), ("root", True)):
        e = env_for(rows["slugify"], user=user)
        await e.reset()
        try:
            out, _ = await bash(e, attack)
            assert ("REPLACED" in out) is replaced, out
        finally:
            await e.close()


async def test_editor_writes_cannot_follow_a_planted_symlink(rows, monkeypatch):
    """The policy links a repo folder to /etc (or a repo file to /etc/passwd) and edits through
    it. Writes run as the agent user inside the sandbox: permission denied. Defence off (the
    editor writing through the root-side file API, which resolves the folder link inside the
    container): /etc/passwd is overwritten."""
    plant = "ln -s /etc /testbed/conf && ln -s /etc/passwd /testbed/users.txt"
    edits = [
        call(
            "file_editor",
            command="str_replace",
            path=path,
            old_str="root:x:0:0:",
            new_str="pwned:x:0:0:",
        )
        for path in ("conf/passwd", "users.txt")
    ]

    async def passwd(e: CodingEnv) -> str:  # through the file API: with `root` renamed, no exec
        return (await e.sb.read_file("/etc/passwd"))[:6]

    e = env_for(rows["slugify"])
    await e.reset()
    try:
        await bash(e, plant)
        for edit in edits:
            obs, _, _ = await e.step(edit)
            assert obs["obs_str"].startswith("Error: cannot write"), obs
            assert "ermission denied" in obs["obs_str"]
        assert await passwd(e) == "root:x"
    finally:
        await e.close()

    async def root_side_write(ws, path, data, *, new):  # the defence off
        await ws.sb.write_file(path, data)

    monkeypatch.setattr(editor, "_write", root_side_write)
    e = env_for(rows["slugify"])
    await e.reset()
    try:
        await bash(e, plant)
        await e.step(edits[0])
        assert await passwd(e) == "pwned:"
    finally:
        await e.close()


FUTURE = (
    "export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=d@d GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=d@d"
    " && git checkout -q -b fix && echo fixed >> textkit/slug.py"
    ' && git commit -qam "Fix: the real fix" && git checkout -q main'
)


async def test_future_commits_are_scrubbed_as_for_cli_rollouts(rows, monkeypatch):
    """A task image whose history holds the fix. The env prepares the workspace with the CLI
    path's function (agent=True: scrub): `git log --all` shows no fix. Defence off (the workspace
    prepared without the scrub): the fix is one command away."""
    row = dataclasses.replace(rows["slugify"], pre_commands=(FUTURE,))
    original = workspace.prepare_workspace

    async def unscrubbed(sb, row, *, agent, **kw):
        return await original(sb, row, agent=False, **kw)

    for scrub in (True, False):
        if not scrub:
            monkeypatch.setattr(workspace, "prepare_workspace", unscrubbed)
        e = env_for(row)
        await e.reset()
        try:
            out, _ = await bash(e, "git log --all --oneline")
            assert ("Fix: the real fix" in out) is (not scrub), out
        finally:
            await e.close()


async def test_tool_calls_per_reply_are_capped(rows):
    e = env_for(rows["slugify"], max_calls_per_turn=2)
    await e.reset()
    try:
        reply = "\n".join(call("bash", command=f"echo {i} >> calls.txt") for i in range(5))
        obs, done, _ = await e.step(reply)
        assert not done and obs["obs_str"].count("Error: not run: at most 2 tool calls") == 3
        out, _ = await bash(e, "cat calls.txt")
        assert out.splitlines()[:2] == ["0", "1"] and "2" not in out.splitlines()
    finally:
        await e.close()


def xml_call(name: str, **arguments) -> str:
    """A call as Qwen3-Coder writes it: every value as text."""
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


async def test_qwen3_coder_calls_are_typed_by_the_tool_schema(rows):
    """Qwen3-Coder's XML calls carry strings; the editor's integer arguments are typed as the
    parser types them with a schema (the env parses without the tool list, to answer unknown
    tools)."""
    e = env_for(rows["slugify"], tool_parser="qwen3_coder")
    await e.reset()
    try:
        obs, _, _ = await e.step(
            xml_call("file_editor", command="create", path="n.txt", file_text="x")
        )
        assert obs["obs_str"] == "Created /testbed/n.txt."
        step = xml_call("file_editor", command="insert", path="n.txt", insert_line=0, new_str="hi")
        obs, done, _ = await e.step(step)
        assert not done and obs["obs_str"].startswith("Inserted into /testbed/n.txt"), obs
        obs, done, _ = await e.step(xml_call("Read", path="a"))
        assert not done and "unknown tool 'Read'" in obs["obs_str"]
    finally:
        await e.close()
