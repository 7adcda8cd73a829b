"""mini-swe-agent's own Python and the task's never see each other: its wheel set, uploaded as
one (gzipped) tar into a real Docker sandbox, runs on the image's python3.11 with ``-I -S``. The task's
``PYTHONPATH`` holds a poisoned ``rich`` (which the CLI imports first thing): without the flags
the poison wins, with them the CLI starts; its packages stay out of the task's ``python3``. An
image without python3.11 is a one-line install error, found before any upload. The adapter's
turn-cap refusal ends it at once."""

from __future__ import annotations

import shlex

import pytest
from test_agents import EDIT, agent_processes, setup

from coding_agent_rl.harness import InstallError, get_harness

pytestmark = [pytest.mark.docker, pytest.mark.agents]

POISON = "/opt/task-site"


async def test_the_task_python_environment_cannot_reach_the_cli_or_see_its_packages(sandbox):
    # Gzipped, as to a remote backend (the turn-cap test below uploads it raw).
    harness = get_harness("mini_swe_agent", extra_args=[], extra_env={}, upload="gzip")
    report = await harness.install(sandbox)
    assert report.source == "upload" and report.version == "2.4.6", report
    assert 0 < report.upload_bytes < 200 << 20, report  # ~386 MB raw
    await sandbox.exec(
        f"mkdir -p {POISON}/rich && echo 'raise SystemExit(\"POISONED rich\")' > "
        f"{POISON}/rich/__init__.py",
        check=True,
    )
    env = {"PYTHONPATH": POISON, "MSWEA_GLOBAL_CONFIG_DIR": "/tmp/mswea", "HOME": "/tmp"}
    # The defence off: the same launcher without -I -S imports the task's poisoned rich.
    off = await sandbox.exec(f"python3.11 {harness.binary} --help 2>&1", env=env)
    assert off.exit_code != 0 and "POISONED rich" in off.stdout, off.stdout[-500:]
    # On: the harness's own command line starts the CLI (its usage) with the same environment.
    assert harness.python is not None
    cmd = " ".join(shlex.quote(a) for a in harness.python.argv())
    on = await sandbox.exec(f"{cmd} --help 2>&1", env=env)
    assert on.exit_code == 0 and "--yolo" in on.stdout and "POISONED" not in on.stdout, on.stdout
    # The task's python3 does not see the CLI's packages.
    task = await sandbox.exec("python3 -c 'import litellm' 2>&1")
    assert "No module named 'litellm'" in task.stdout, task.stdout
    # A second install in the same sandbox finds its stamp: nothing is uploaded again.
    assert (await harness.install(sandbox)).source == "installed"


async def test_an_image_without_its_python_is_a_clear_install_error(sandbox):
    await sandbox.exec("mv /usr/bin/python3.11 /usr/bin/hidden-python", check=True)
    with pytest.raises(InstallError, match=r"no python3\.11 on its PATH"):
        await get_harness("mini_swe_agent", extra_args=[], extra_env={}).install(sandbox)


async def test_the_turn_cap_refusal_ends_it_at_once(sandbox, stack, tmp_path):
    """The adapter's 429 at the turn cap is final: no retries (its default backs off for
    minutes, past this budget)."""
    adapter, harness, ctx = await setup(
        sandbox, stack, "mini_swe_agent", EDIT, sid="mini-429", tmp_path=tmp_path, max_turns=1
    )
    run = await harness.run(sandbox, ctx, "Replace 'world' with 'agent' in greeting.txt.", 150)
    assert run.exit_code not in (0, None) and not run.timed_out, run.log_tail[-2000:]
    assert "RateLimitError" in run.log_tail, run.log_tail[-2000:]
    assert len(adapter.sessions.turns("mini-429")) == 1
    assert await agent_processes(sandbox) == []
