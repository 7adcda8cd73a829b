"""Detached launch and wait in a real Docker sandbox: exit codes, prompt exit detection, budget
kills, the replay guard, and no processes left behind."""

from __future__ import annotations

import asyncio
import time

import pytest

from coding_agent_rl.harness import launch
from coding_agent_rl.harness.agent_user import ensure_agent_user
from coding_agent_rl.sandbox.base import SandboxError

pytestmark = pytest.mark.docker


def spec(cmd: str, *, tag: str = "t", user: str = "root", cwd: str = "/tmp") -> launch.LaunchSpec:
    return launch.LaunchSpec(
        argv=["bash", "-c", cmd], env={"GREETING": "hi there"}, cwd=cwd, user=user, tag=tag
    )


async def processes(sb) -> list[str]:
    """Every process in the container except the keep-alive (pid 1's tree) and this query."""
    res = await sb.exec("echo $$; ps -eo pid=,ppid=,user=,args=", timeout=30)
    me, *lines = res.stdout.splitlines()
    rows = [line.split(None, 3) for line in lines]
    return [
        " ".join(r)
        for r in rows
        if (me not in r[:2] and r[0] != "1" and r[1] != "1")
        or (r[1] == "1" and "sleep infinity" not in r[3])
    ]


async def test_exit_code_env_and_log_tail(sandbox):
    res = await launch.run_detached(sandbox, spec('echo "$GREETING from $(pwd)"; exit 3'), 30)
    assert (res.exit_code, res.timed_out, res.launched) == (3, False, True)
    assert "hi there from /tmp" in res.log_tail
    assert res.log_path == "/opt/coding-agent-rl/run/t/agent.log"


async def test_path_prefix_keeps_the_sandboxs_own_path(sandbox):
    s = launch.LaunchSpec(
        argv=["bash", "-c", "echo $PATH"],
        env={},
        cwd="/",
        user="root",
        tag="p",
        path_prefix="/opt/x/bin",
    )
    res = await launch.run_detached(sandbox, s, 30)
    own = (await sandbox.exec("echo $PATH")).stdout.strip()
    assert res.log_tail.strip() == f"/opt/x/bin:{own}" and "/usr/bin" in own


async def test_exit_is_noticed_within_a_poll_and_a_round_trip(sandbox):
    """The bound is relative to this sandbox's own exec round trip, measured in this test (a
    loaded machine slows both alike), not a fixed number of milliseconds."""
    s = spec("sleep 1.5; touch /tmp/ended")
    await launch.prepare(sandbox, s)
    assert await launch.launch(sandbox, s)
    seen, timed_out = await launch.wait(sandbox, s, time.monotonic() + 30)
    noticed = time.time()
    assert (seen, timed_out) == ("0", False)
    ended = float((await sandbox.exec("stat -c %.6Y /opt/coding-agent-rl/run/t/exit")).stdout)
    latency = noticed - ended  # host and container share one clock
    round_trips = []
    for _ in range(3):
        t0 = time.monotonic()
        await sandbox.exec("true")
        round_trips.append(time.monotonic() - t0)
    bound = launch.POLL_S + 2 * max(round_trips) + 0.05
    assert 0 <= latency < bound, f"exit noticed {latency * 1000:.0f} ms after it happened"
    await launch.kill(sandbox, s)


async def test_budget_overrun_kills_the_whole_session(sandbox):
    # A child in its own process group (job control) and a plain background child.
    cmd = "set -m; sleep 301 & sleep 302 & set +m; sleep 303 & echo started; wait"
    t0, budget_s = time.monotonic(), 2
    res = await launch.run_detached(sandbox, spec(cmd), budget_s=budget_s)
    assert res.timed_out and res.exit_code is None
    # Held to its budget, then killed: never waited for the children (301+ s of sleep).
    assert budget_s <= time.monotonic() - t0 < 301 / 10
    assert "started" in res.log_tail
    assert await processes(sandbox) == []


async def test_background_children_of_a_finished_agent_are_killed(sandbox):
    await ensure_agent_user(sandbox, "agent", "/home/agent", "/work")
    # setsid + nohup: a daemon in a new session; only the agent user's sweep catches it.
    cmd = "setsid nohup sleep 310 >/dev/null 2>&1 & sleep 311 & id -un"
    res = await launch.run_detached(sandbox, spec(cmd, user="agent", cwd="/work"), 30)
    assert res.exit_code == 0 and res.log_tail.strip() == "agent"
    assert await processes(sandbox) == []


async def test_replayed_launch_starts_nothing_and_relaunch_runs_again(sandbox):
    s = spec("echo run >> /tmp/count; sleep 0.3")
    await launch.prepare(sandbox, s)
    first, replay = await asyncio.gather(launch.launch(sandbox, s), launch.launch(sandbox, s))
    assert sorted([first, replay]) == [False, True]
    assert not await launch.launch(sandbox, s)  # a later replay too
    assert (await launch.wait(sandbox, s, time.monotonic() + 30)) == ("0", False)
    assert (await sandbox.read_file("/tmp/count")).splitlines() == ["run"]
    res = await launch.run_detached(sandbox, s, 30)  # same tag, deliberately again
    assert res.launched and res.exit_code == 0
    assert (await sandbox.read_file("/tmp/count")).splitlines() == ["run", "run"]


async def test_an_agent_killed_from_outside_is_reported_without_exit_code(sandbox):
    s = spec("sleep 60")
    task = asyncio.create_task(launch.run_detached(sandbox, s, 60))
    while not (await sandbox.exec("test -s /opt/coding-agent-rl/run/t/pid")).ok:
        assert not task.done(), task
        await asyncio.sleep(0.05)  # until the session has started and written its pid
    await sandbox.exec("kill -KILL -- -$(cat /opt/coding-agent-rl/run/t/pid)")
    res = await asyncio.wait_for(task, 30)
    assert res.exit_code is None and not res.timed_out and res.duration_s < 60 / 6


async def test_missing_workdir_is_exit_126_with_a_message(sandbox):
    res = await launch.run_detached(sandbox, spec("true", cwd="/no/such dir"), 30)
    assert res.exit_code == 126 and "cannot cd to /no/such dir" in res.log_tail


class FlakyWait:
    """Stand-in for a broken transport: the first wait exec fails, everything else is real."""

    def __init__(self, sb):
        self.sb, self.failed = sb, 0

    async def exec(self, cmd, **kw):
        if "echo nopid" in cmd and not self.failed:
            self.failed += 1
            raise SandboxError("injected transport failure")
        return await self.sb.exec(cmd, **kw)

    def __getattr__(self, name):
        return getattr(self.sb, name)


async def test_wait_survives_a_transport_error_stand_in(sandbox):
    flaky = FlakyWait(sandbox)
    res = await launch.run_detached(flaky, spec("sleep 0.5; exit 7"), 30)
    assert flaky.failed == 1 and res.exit_code == 7 and not res.timed_out


async def test_agent_user_is_created_without_shadow_utils(sandbox):
    # Minimal images may lack useradd: the passwd/group entries are written by hand.
    await sandbox.exec("mv /usr/sbin/useradd /usr/sbin/useradd.off", check=True)
    await sandbox.exec("mkdir -p /repo && touch /repo/f", check=True)
    await ensure_agent_user(sandbox, "agent", "/home/agent", "/repo")
    await ensure_agent_user(sandbox, "agent", "/home/agent", "/repo")  # idempotent
    res = await sandbox.exec(
        "id -un; echo $HOME; stat -c %U /repo/f; touch /home/agent/x && echo ok; "
        "git config --system safe.directory",
        user="agent",
    )
    assert res.stdout.split() == ["agent", "/home/agent", "agent", "ok", "*"]
    assert (await sandbox.exec("grep -c '^agent:' /etc/passwd")).stdout.strip() == "1"
