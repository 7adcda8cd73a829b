"""A hostile agent, for real: Claude Code in Docker, driven by a scripted policy whose shell
commands attack the sandbox's limits, the host, and the adapter, in one concurrent batch next to
a control rollout that must still solve its task.

* a fork bomb, a memory hog, filling the disk: each rollout ends as a ``model`` failure whose
  reason names the limit, within seconds;
* connecting to listeners the test opens on every address of this host: nothing connects, names
  do not resolve;
* the adapter from inside: no key, a live session's key that is not the sandbox's own, a 64 MiB
  body, malformed fields: 401, 401, 413, 400 (its own key still works: 200);
* nothing is left behind (containers, capped disks).

Two of the attacks run once more on a runtime with the defences off (no limits, the open bridge
network): there the hog gets its memory and a host listener is reached.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import pathlib
import time
from typing import Any

import pytest
from support.rollout_helpers import (
    FAST_FAIL_HARNESS,
    RUN_ID,
    base_sample,
    check_outcome,
    containers,
    replace_row,
    rollout_config,
    runtime,
    solve_steps,
    task_rule,
    write_script,
)

from coding_agent_rl.sandbox.disk import disk_dir
from coding_agent_rl.sandbox.netns import host_ipv4_addresses

pytestmark = [pytest.mark.docker, pytest.mark.agents]
log = logging.getLogger(__name__)

LIMITS = {"memory": "1g", "pids": 256, "disk": "512m"}  # Claude Code needs ~300 MB itself
OFF = {"memory": None, "pids": None, "disk": None, "cpus": None, "nofile": None}
HARNESS = FAST_FAIL_HARNESS
OFF_RUN = f"{RUN_ID}-off"
DECOY = "decoy-session-" + "0" * 32  # a live session no sandbox owns

FORK_BOMB = {"shell": "b() { b | b & }; b; sleep 20"}
# Touches every page of 2 GiB, then says so in a file the diff carries (only if it got them).
MEMORY_HOG = {
    "shell": 'python3 -c \'x = bytearray(2 << 30); x[::4096] = b"x" * len(x[::4096]); '
    'open("/testbed/hog.txt", "w").write("ALLOCATED 2048 MiB\\n")\''
}
FILL_DISK = {"shell": "dd if=/dev/zero of=/testbed/fill bs=1M count=1024; sleep 5"}

ADAPTER_ABUSE = r"""
import json, os, urllib.error, urllib.request
base = os.environ["ANTHROPIC_BASE_URL"]
own = os.environ["ANTHROPIC_AUTH_TOKEN"]
def call(path, key, body=None):
    req = urllib.request.Request(base + path, data=body, method="POST" if body else "GET")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    req.add_header("Content-Type", "application/json")
    try:
        return urllib.request.urlopen(req, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return type(e).__name__
out = {
    "no_key": call("/v1/models", None),
    "decoy_key": call("/v1/models", "DECOY"),
    "body_64mib": call("/v1/messages", own, b'{"pad": "' + b"x" * (64 << 20) + b'"}'),
    "malformed": call("/v1/messages", own, json.dumps({"model": "m", "max_tokens": "lots", "messages": "hi"}).encode()),
    "own_key": call("/v1/models", own),
}
open("/testbed/attack.json", "w").write(json.dumps(out))
print(out)
""".replace("DECOY", DECOY)


class HostListeners:
    def __init__(self) -> None:
        self.accepted = 0
        self.servers: list[asyncio.base_events.Server] = []

    async def start(self) -> list[tuple[str, int]]:
        addrs = host_ipv4_addresses()

        def hit(r, w):
            self.accepted += 1
            w.close()

        for a in addrs:
            self.servers.append(await asyncio.start_server(hit, a, 0))
        return [s.sockets[0].getsockname()[:2] for s in self.servers]

    def close(self) -> None:
        for s in self.servers:
            s.close()


def probe_host(targets: list[tuple[str, int]]) -> dict[str, str]:
    """Dial every listener, look up an outside name; the verdicts go into the diff."""
    cmd = "".join(
        f"timeout 3 bash -c 'exec 3<>/dev/tcp/{a}/{p}' 2>/dev/null && echo REACHED {a} || echo BLOCKED {a}; "
        for a, p in targets
    )
    return {"shell": f"{{ {cmd}getent hosts example.com || echo NO-DNS; }} > /testbed/probe.txt"}


@dataclasses.dataclass
class Batch:
    outcomes: dict[str, Any]
    listeners: HostListeners  # dialled by the adapter-only sandbox
    off_listeners: HostListeners  # dialled by the defence-off one
    tmp: pathlib.Path

    def added_lines(self, name: str) -> list[str]:
        """The lines the rollout's diff adds."""
        r = self.outcomes[name].record
        root = self.tmp / ("off" if name.startswith("off_") else "on")
        diff = (root / r["artifacts"]["diff"]).read_text()
        return [x[1:] for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++")]


async def run_batch(rows: dict[str, Any], tmp: pathlib.Path) -> Batch:
    listeners, off_listeners = HostListeners(), HostListeners()
    targets, off_targets = await listeners.start(), await off_listeners.start()
    say = {"say": "Done."}
    script_off = write_script(
        tmp / "script_off.json",
        [
            task_rule(rows["daterange"], [MEMORY_HOG, say]),
            task_rule(rows["confparse"], [probe_host(off_targets), say]),
        ],
    )
    script = write_script(
        tmp / "script.json",
        [
            task_rule(rows["slugify"], solve_steps(rows["slugify"])),
            task_rule(rows["pager"], [FORK_BOMB, say]),
            task_rule(rows["daterange"], [MEMORY_HOG, say]),
            task_rule(rows["editor"], [FILL_DISK, say]),
            task_rule(rows["confparse"], [probe_host(targets), say]),
            task_rule(
                rows["money"],
                [{"shell": f"python3 - <<'EOF'\n{ADAPTER_ABUSE}\nEOF"}, say],
            ),
        ],
    )
    on = rollout_config(tmp / "on", infra_retries=0, agent_budget_s=180.0)
    on.sandbox_options.update(LIMITS)
    off = rollout_config(tmp / "off", infra_retries=0, agent_budget_s=180.0, agent_network="open")
    off.sandbox_options.update({**OFF, "hardened": False, "run_id": OFF_RUN})
    try:
        async with (
            runtime(policy=script, rollout=on, harness_options=HARNESS) as rt,
            runtime(policy=script_off, rollout=off, harness_options=HARNESS) as rt_off,
        ):
            rt.adapter.sessions.open(DECOY)
            jobs = {
                "control": (rt, rows["slugify"]),
                "fork_bomb": (rt, rows["pager"]),
                "memory_hog": (rt, rows["daterange"]),
                "fill_disk": (rt, rows["editor"]),
                "host_listeners": (rt, rows["confparse"]),
                "adapter_abuse": (rt, rows["money"]),
                "off_memory_hog": (rt_off, replace_row(rows["daterange"], instance_id="off_hog")),
                "off_host_listeners": (
                    rt_off,
                    replace_row(rows["confparse"], instance_id="off_listeners"),
                ),
            }
            t0 = time.monotonic()
            tasks = {
                name: asyncio.create_task(r.runner.run(row, base_sample(row, i)))
                for i, (name, (r, row)) in enumerate(jobs.items())
            }
            outcomes = {name: await t for name, t in tasks.items()}
            log.warning("isolation batch: %.1fs", time.monotonic() - t0)
    finally:
        listeners.close()
        off_listeners.close()
    return Batch(outcomes, listeners, off_listeners, tmp)


@pytest.fixture(scope="module")
def batch(rows, tmp_path_factory) -> Batch:
    assert containers() == []
    b = asyncio.run(run_batch(rows, tmp_path_factory.mktemp("isolation")))
    for name, o in b.outcomes.items():
        r = o.record
        log.warning(
            "%s: %s", name, {k: r.get(k) for k in ("failure_kind", "reward", "fail_reason")}
        )
    return b


def record(batch: Batch, name: str) -> dict[str, Any]:
    o = batch.outcomes[name]
    check_outcome(o.samples, o.record)
    return o.record


def test_control_rollout_solves_its_task_meanwhile(batch):
    r = record(batch, "control")
    assert r["reward"] == 1.0 and r["failure_kind"] is None
    iso = r["isolation"]
    assert iso["agent_network"] == "adapter-only" and iso["grading_network"] == "none"
    assert iso["limits"]["memory"] == 1 << 30 and iso["limits"]["pids"] == 256


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("fork_bomb", "pids limit 256 reached"),
        ("memory_hog", "memory limit 1 GiB exceeded"),
        ("fill_disk", "disk limit 512 MiB reached"),
    ],
)
def test_a_limit_hit_ends_the_rollout_as_the_models_failure(batch, name, reason):
    r = record(batch, name)
    assert r["failure_kind"] == "model" and r["reward"] == 0.0
    assert r["fail_reason"].startswith(reason) and r["limit_breach"] == r["fail_reason"]
    assert r["turns"] >= 1 and r["timings"]["agent_s"] < 60, r["timings"]


def test_the_host_and_the_internet_are_unreachable_from_the_agent(batch):
    r = record(batch, "host_listeners")
    assert r["failure_kind"] == "model" and "limit_breach" not in r
    verdicts = batch.added_lines("host_listeners")
    assert batch.listeners.accepted == 0, verdicts
    assert verdicts[-1] == "NO-DNS" and len(verdicts) == len(batch.listeners.servers) + 1
    assert all(v.startswith("BLOCKED ") for v in verdicts[:-1]), verdicts


def test_the_adapter_refuses_everything_but_the_sandboxs_own_session(batch):
    record(batch, "adapter_abuse")
    statuses = json.loads(batch.added_lines("adapter_abuse")[0])
    assert statuses == {
        "no_key": 401,
        "decoy_key": 401,
        "body_64mib": 413,
        "malformed": 400,
        "own_key": 200,
    }, statuses


def test_without_the_defences_the_attacks_get_through(batch):
    hog = record(batch, "off_memory_hog")
    assert "limit_breach" not in hog and hog["isolation"]["limits"]["memory"] is None
    assert "ALLOCATED 2048 MiB" in batch.added_lines("off_memory_hog")  # it got its 2 GiB
    probe = record(batch, "off_host_listeners")
    assert probe["isolation"]["agent_network"] == "open"
    reached = [v for v in batch.added_lines("off_host_listeners") if v.startswith("REACHED")]
    assert reached and batch.off_listeners.accepted >= len(reached), reached


def test_nothing_is_left(batch):
    # (The attacks' containment is read from each sandbox's own cgroup: the limit_breach
    # records above. The whole host's memory and process count are not asserted: other work on
    # a shared machine moves them.)
    assert containers() == [] and containers(OFF_RUN) == []
    assert not (disk_dir() / RUN_ID).exists()
