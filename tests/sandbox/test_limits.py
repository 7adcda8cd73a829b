"""Limits, network modes and task options as plain data: parsing, merging, what each backend is
asked for. (The attacks against the limits run in test_limits_attacks.py.)"""

from __future__ import annotations

import pytest
from support import BASE_IMAGE

from coding_agent_rl.grading.prepared import grading_network, sandbox_options_for
from coding_agent_rl.limits import (
    DEFAULT_LIMITS,
    GIB,
    ROOT_CAPS,
    Limits,
    parse_resources,
    parse_size,
    resolve_limits,
)
from coding_agent_rl.rollout.isolation import AgentNetwork, agent_network_mode
from coding_agent_rl.sandbox import cgroups, create_sandbox
from coding_agent_rl.sandbox.base import NetworkUnsupported
from coding_agent_rl.sandbox.docker_isolation import disk_paths, host_config_kwargs
from coding_agent_rl.sandbox.task import task_options


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("4g", 4 * GIB),
        ("512m", 512 << 20),
        ("1.5GiB", 3 * GIB // 2),
        (1024, 1024),
        ("64 MB", 64 << 20),
    ],
)
def test_sizes(value, size):
    assert parse_size(value, "x") == size


@pytest.mark.parametrize("value", ["lots", "-1g", "0", True, "4 gigs"])
def test_bad_sizes_name_the_option(value):
    with pytest.raises(ValueError, match="memory"):
        resolve_limits({"memory": value})


def test_defaults_and_none_turns_a_limit_off():
    lim = resolve_limits({})
    assert lim == DEFAULT_LIMITS and lim.memory == 4 * GIB and lim.pids == 1024
    assert resolve_limits({"memory": None, "pids": None}).memory is None
    with pytest.raises(ValueError, match="pids: expected a positive int"):
        resolve_limits({"pids": 2.5})
    with pytest.raises(ValueError, match="unknown resource 'memroy'"):
        parse_resources({"memroy": "8g"})
    assert parse_resources({"cpus": 4, "disk": "20g"}) == {"cpus": 4, "disk": "20g"}


def test_docker_host_config_limits_and_privileges():
    kw = host_config_kwargs(Limits(memory=256 << 20, cpus=0.5, pids=64, nofile=1000), hardened=True)
    assert (kw["mem_limit"], kw["memswap_limit"]) == (256 << 20, 256 << 20)  # no swap on top
    assert (kw["nano_cpus"], kw["pids_limit"]) == (5 * 10**8, 64)
    assert kw["ulimits"][0]["Soft"] == kw["ulimits"][0]["Hard"] == 1000
    assert kw["cap_drop"] == ["ALL"] and set(kw["cap_add"]) == set(ROOT_CAPS)
    assert "NET_RAW" not in ROOT_CAPS and "SYS_ADMIN" not in ROOT_CAPS
    assert kw["security_opt"] == ["no-new-privileges"]
    assert "cap_drop" not in host_config_kwargs(DEFAULT_LIMITS, hardened=False)


def test_disk_paths_cover_world_writable_places_once():
    assert disk_paths(["/testbed", "/home/agent/repo", "/tmp/x"]) == [
        "/home",
        "/run/lock",
        "/testbed",
        "/tmp",
        "/var/tmp",
    ]


V1_MEMORY = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
V2_MEMORY = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"


def test_cgroup_counters_v1_and_v2():
    assert cgroups.parse_counters(V1_MEMORY, "max 7\n") == {"oom_kill": 3, "pids_max": 7}
    # v2's memory.events has a "max" line too: only pids.events' counts forks refused
    assert cgroups.parse_counters(V2_MEMORY, "max 0\n") == {"oom_kill": 2, "pids_max": 0}
    out = f"== memory\n{V2_MEMORY}== pids\nmax 5\n"
    assert cgroups.parse_script_output(out) == {"oom_kill": 2, "pids_max": 5}
    lim = Limits(memory=GIB, pids=64)
    assert cgroups.breaches({"oom_kill": 1, "pids_max": 5}, lim) == [
        "memory limit 1 GiB exceeded (1 OOM kill(s))",
        "pids limit 64 reached (5 fork(s) refused)",
    ]
    assert cgroups.breaches({"oom_kill": 0, "pids_max": 0}, lim) == []


def test_task_options_apply_resources_where_enforced(caplog, use_e2b_stand_in):
    opts = task_options(
        "docker", {"memory": "4g", "run_id": "r"}, resources={"memory": "8g"}, writable=["/w"]
    )
    assert opts == {"memory": "8g", "run_id": "r", "writable": ["/w"]}
    nested = task_options("local", {"writable": ["/opt/x"]}, writable=["/opt/x/run", "/w"])
    # a read-only image (local) also gets what every task sandbox writes: /etc, our tree
    assert nested["writable"] == ["/etc", "/opt/coding-agent-rl", "/opt/x", "/w"]
    with caplog.at_level("WARNING"):
        assert task_options("e2b", {}, resources={"memory": "8g"}, writable=["/w"]) == {}
    assert "does not enforce a per-sandbox memory limit" in caplog.text


def test_agent_network_modes_per_backend(monkeypatch, use_e2b_stand_in):
    monkeypatch.delenv("CODING_AGENT_RL_AGENT_NETWORK", raising=False)
    assert agent_network_mode() == "adapter-only"
    monkeypatch.setenv("CODING_AGENT_RL_AGENT_NETWORK", "open")
    assert agent_network_mode() == "open"
    with pytest.raises(ValueError, match="expected one of adapter-only, open, none"):
        agent_network_mode("internet")
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    docker = AgentNetwork("adapter-only", "docker")
    assert docker.inside and docker.options() == {"network": "none"}
    assert docker.public_url(18001) == "http://127.0.0.1:18001"
    assert AgentNetwork("open", "docker").options() == {"network": "bridge"}
    assert AgentNetwork("adapter-only", "local").options() == {"network": "none"}
    assert AgentNetwork("open", "local").options() == {"network": "host"}
    # A remote engine cannot host a listener inside its sandboxes: said up front.
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with pytest.raises(NetworkUnsupported, match="engine on this machine"):
        AgentNetwork("adapter-only", "docker")
    # E2B: the SDK's egress filter around the adapter's public address.
    with pytest.raises(NetworkUnsupported, match="ADAPTER_PUBLIC_HOST"):
        AgentNetwork("adapter-only", "e2b")
    monkeypatch.setenv("ADAPTER_PUBLIC_HOST", "203.0.113.5")
    e2b = AgentNetwork("adapter-only", "e2b")
    assert not e2b.inside and e2b.options() == {
        "network": "adapter-only",
        "allow_out": ["203.0.113.5"],
    }
    assert e2b.public_url(18001) == "http://203.0.113.5:18001"


async def test_e2b_network_reaches_the_sdk(use_e2b_stand_in):
    """What the e2b backend asks the SDK for (E2B's cloud is unreachable: the SDK stand-in)."""
    created = use_e2b_stand_in.created
    for options in (
        {"network": "adapter-only", "allow_out": ["203.0.113.5"]},
        {"network": "adapter-only", "allow_out": ["adapter.example.org"], "dns": True},
        sandbox_options_for("e2b", {}),
    ):
        async with create_sandbox("e2b", BASE_IMAGE, **options):
            pass
    strict, named, grading = created[-3:]
    assert strict["network"] == {
        "allow_out": ["203.0.113.5"],
        "deny_out": ["0.0.0.0/0"],
        "dns_servers": [],
    }
    assert "dns_servers" not in named["network"]  # a name needs a resolver (asked for: dns)
    with pytest.raises(ValueError, match="a name needs DNS"):
        create_sandbox("e2b", "x", network="adapter-only", allow_out=["adapter.example.org"])
    assert grading["allow_internet_access"] is False
    assert grading_network("e2b") == "none" and grading_network("docker") == "none"
    with pytest.raises(ValueError, match="needs allow_out"):
        create_sandbox("e2b", "x", network="adapter-only")


def test_grading_network_is_reported_when_a_backend_cannot_turn_it_off(monkeypatch):
    from coding_agent_rl.sandbox import e2b as e2b_backend

    class OldSDK:  # an SDK without the internet switch
        @classmethod
        async def create(cls, template=None, timeout=None, metadata=None, envs=None): ...

    monkeypatch.setattr(e2b_backend, "AsyncSandbox", OldSDK)
    assert grading_network("e2b").startswith("on (this e2b SDK cannot turn the internet off")
    assert "network" not in sandbox_options_for("e2b", {})
