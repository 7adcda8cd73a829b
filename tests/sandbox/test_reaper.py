"""The reaper's rules on this host's real processes: ours die, foreign sessions never do."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from coding_agent_rl.sandbox import reaper


def spawn(cmd: str, token: str, *, session: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, **reaper.token_env(token)}
    return subprocess.Popen(
        ["bash", "-c", reaper.session_wrapped(cmd) if session else cmd],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=not session,
    )


def alive(tag: str) -> list[str]:
    """Live ``sleep N<tag>`` processes (not zombies), by command line."""
    ps = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    rows = [line.split(None, 1) for line in ps.splitlines()]
    return sorted(
        args
        for stat, args in rows
        if args.startswith("sleep ") and tag in args and not stat.startswith("Z")
    )


@pytest.mark.parametrize("how", ["bash_script", "python_here"])
def test_reaper_kills_the_tagged_session_and_spares_everything_else(how: str) -> None:
    mine, theirs = reaper.new_token(), reaper.new_token()
    tag = f"{os.getpid() % 800 + 100}.{time.time_ns() % 9000 + 1000}"
    # Ours: a session with a child that cleared its environment (caught by the session rule).
    ours = spawn(f"env -i sleep 1{tag} & sleep 2{tag}", mine, session=True)
    # A foreign session led by an untagged process, with one tagged child inside it.
    foreign = subprocess.Popen(
        ["bash", "-c", f"sleep 3{tag} & CODING_AGENT_RL_EXEC={mine} sleep 4{tag} & wait"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    other = spawn(f"sleep 5{tag}", theirs, session=True)
    try:
        deadline = time.monotonic() + 10
        while len(alive(tag)) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        if how == "bash_script":
            assert subprocess.run(reaper.kill_argv(mine)).returncode == 0
        else:
            assert reaper.kill_tagged_here(mine) >= 3
        # 1 and 2: our session; 4: tagged, in a foreign session; 3 and 5 are not ours.
        expected = [f"sleep 3{tag}", f"sleep 5{tag}"]
        deadline = time.monotonic() + 10  # until the killed ones are gone (no fixed sleep)
        while (survivors := alive(tag)) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert survivors == expected
        assert foreign.poll() is None  # the foreign session's leader lives on
    finally:
        for proc in (ours, foreign, other):
            proc.kill()
            proc.wait()
        reaper.kill_tagged_here(theirs)
        subprocess.run(["pkill", "-KILL", "-s", str(foreign.pid)], check=False)
