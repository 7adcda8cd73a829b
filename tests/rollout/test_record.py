"""RolloutRecord is the results.jsonl line: the same keys, values and order as the dict it
replaced (the runner's code path below is the one every rollout takes)."""

from __future__ import annotations

import json

from coding_agent_rl.rollout.record import RolloutRecord


def legacy_line() -> dict:
    """The record dict built by hand, by the same steps in the same order."""
    record = {
        "rollout_id": 3,
        "instance_id": "example__pager",
        "sample_index": 3,
        "group_index": 1,
        "session_id": "sid",
        "reward": 0.0,
        "failure_kind": None,
        "abort_reason": None,
        "agent_exit_code": None,
        "agent_timed_out": None,
        "isolation": {"agent_network": "adapter-only", "grading_network": "none"},
    }
    record["routing_key"] = "slime-uuid"
    record["isolation"]["limits"] = {"memory": "4 GiB"}
    record["agent_exit_code"] = 0
    record["agent_timed_out"] = False
    record["adapter_errors"] = ["request: bad tool"]
    record["artifacts"] = {"diff": "rollouts/x/diff.patch"}
    record.update(reward=1.0, f2p_passed=2, f2p_total=2, diff_truncated=None)
    record["failure_kind"] = None
    record.update(num_segments=1, turns=3, metrics={"tokens_generated": 10})
    record["timings"], record["profile"] = {"total_s": 1.0}, {"agent_cli": 0.5}
    record["retries"] = 0
    record.setdefault("metrics", {})["retries"] = 0
    return record


def test_the_line_is_unchanged():
    r = RolloutRecord(
        rollout_id=3,
        instance_id="example__pager",
        sample_index=3,
        group_index=1,
        session_id="sid",
        isolation={"agent_network": "adapter-only", "grading_network": "none"},
    )
    r.set(routing_key="slime-uuid")
    r.isolation["limits"] = {"memory": "4 GiB"}
    r.agent_exit_code, r.agent_timed_out = 0, False
    r.set(adapter_errors=["request: bad tool"])
    r.set(artifacts={"diff": "rollouts/x/diff.patch"})
    r.set(reward=1.0, f2p_passed=2, f2p_total=2, diff_truncated=None)
    r.failure_kind = None
    r.set(num_segments=1, turns=3, metrics={"tokens_generated": 10})
    r.set(timings={"total_s": 1.0}, profile={"agent_cli": 0.5})
    line = r.as_dict()
    line["retries"] = 0
    line.setdefault("metrics", {})["retries"] = 0
    assert json.dumps(line) == json.dumps(legacy_line())
    assert r.get("f2p_passed") == 2 and "turns" in r and "fail_reason" not in r


def test_an_aborted_record_keeps_its_placeholder_fields():
    r = RolloutRecord(rollout_id=0, instance_id="t", sample_index=0, group_index=0, session_id="s")
    r.set(failure_kind="infra", abort_reason="InfraFailure: sandbox: gone", reward=0.0)
    r.set(infra_stage="sandbox")
    r.extra.setdefault("num_segments", 0)
    line = r.as_dict()
    assert line["failure_kind"] == "infra" and line["infra_stage"] == "sandbox"
    assert list(line)[-2:] == ["infra_stage", "num_segments"]
