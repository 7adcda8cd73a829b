"""The run folder's bookkeeping: attempts, what ``--resume`` re-runs, samples never duplicated,
the summary by each rollout's latest record, and progress per node (real files, no engine)."""

from __future__ import annotations

import io
import json
import pathlib
from typing import Any

from coding_agent_rl.rollout.batch import Progress
from coding_agent_rl.rollout.outputs import RunWriter, rollout_key
from coding_agent_rl.types import Sample, aborted_sample


def record(iid: str, kind: str | None, reward: float = 0.0, **extra: Any) -> dict[str, Any]:
    return {
        "instance_id": iid,
        "sample_index": 0,
        "reward": reward,
        "failure_kind": kind,
        "num_segments": 0 if kind == "infra" else 1,
        **extra,
    }


def sample(iid: str) -> Sample:
    return Sample(index=0, tokens=[1, 2], response_length=1, metadata={"instance_id": iid})


def lines(path: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_an_infra_record_is_retried_a_model_failure_is_not_and_attempts_are_capped(
    tmp_path: pathlib.Path,
) -> None:
    w = RunWriter(tmp_path)
    w.add([aborted_sample(sample("infra"), "engine down")], record("infra", "infra"))
    w.add([sample("model")], record("model", "model"))
    w.add([sample("solved")], record("solved", None, 1.0))
    w.close({})
    assert [r["attempt"] for r in lines(tmp_path / "results.jsonl")] == [1, 1, 1]
    # An infra record contributes no training sample (its placeholder trains nothing).
    assert [s["metadata"]["instance_id"] for s in lines(tmp_path / "samples.jsonl")] == [
        "model",
        "solved",
    ]

    w = RunWriter(tmp_path, resume=True, resume_attempts=3)
    assert w.done_keys() == {rollout_key("model", 0), rollout_key("solved", 0)}
    w.add([], record("infra", "infra"))  # attempt 2 of 3: still to re-run
    assert w.attempts(rollout_key("infra", 0)) == 2
    assert rollout_key("infra", 0) not in w.done_keys()
    w.add([], record("infra", "infra"))  # attempt 3 of 3: final
    assert rollout_key("infra", 0) in w.done_keys()
    w.close({})
    assert [r["attempt"] for r in lines(tmp_path / "results.jsonl")] == [1, 1, 1, 2, 3]

    # With the default of 2 attempts, a rollout with one infra record is re-run once ...
    other = tmp_path / "other"
    w = RunWriter(other)
    w.add([], record("flaky", "infra"))
    w.close({})
    w = RunWriter(other, resume=True, resume_attempts=2)
    assert w.done_keys() == set()
    w.add([sample("flaky")], record("flaky", None, 1.0))  # ... and its re-run succeeds
    summary = w.summary()
    w.close(summary)
    # Every record kept; the summary counts the rollout once, by its latest record.
    assert [(r["failure_kind"], r["attempt"]) for r in lines(other / "results.jsonl")] == [
        ("infra", 1),
        (None, 2),
    ]
    assert summary["total"] == 1 and summary["solved"] == 1 and summary["infra_failures"] == 0
    assert summary["rollouts_by_node"] == {}  # these records name no node
    assert len(lines(other / "samples.jsonl")) == 1


def test_resume_drops_samples_whose_record_was_never_written(tmp_path: pathlib.Path) -> None:
    """A run killed between a rollout's samples and its record: the rollout re-runs, and its
    first samples must not stay next to the re-run's."""
    w = RunWriter(tmp_path)
    w.add([sample("done"), sample("done")], record("done", None, 1.0, num_segments=2))
    w.close({})
    with (tmp_path / "samples.jsonl").open("a") as f:  # the killed run's last act
        f.write(json.dumps(sample("cut").to_dict()) + "\n")
        f.write('{"index": 0, "metadata": {"instance_id": "cut"}, "tok')  # half a line

    with (tmp_path / "results.jsonl").open("a") as f:  # or killed mid-record
        f.write('{"instance_id": "cut", "sample_ind')

    w = RunWriter(tmp_path, resume=True, resume_attempts=2)
    assert w.done_keys() == {rollout_key("done", 0)}
    w.add([sample("cut")], record("cut", None, 1.0))
    w.close(w.summary())
    ids = [s["metadata"]["instance_id"] for s in lines(tmp_path / "samples.jsonl")]
    assert ids == ["done", "done", "cut"]
    # The cut record line stays (it is history) but the re-run's line after it is whole.
    results = (tmp_path / "results.jsonl").read_text().splitlines()
    assert results[1] == '{"instance_id": "cut", "sample_ind'
    assert json.loads(results[2])["instance_id"] == "cut"
    again = RunWriter(tmp_path, resume=True)
    assert again.done_keys() == {rollout_key("done", 0), rollout_key("cut", 0)}
    again.close(again.summary())


def test_appending_under_a_trainer_numbers_no_attempts_and_holds_nothing(
    tmp_path: pathlib.Path,
) -> None:
    w = RunWriter(tmp_path, append=True, samples=False)
    w.add([], record("a", None, 1.0))
    w.close({})
    assert "attempt" not in lines(tmp_path / "results.jsonl")[0]
    assert w.results == [] and w.done_keys() == set()


def test_progress_counts_per_node_without_passing_over_records() -> None:
    stream = io.StringIO()
    p = Progress(4, stream=stream)
    p.update(record("a", None, 1.0, node="n1"))
    p.update(record("b", "model", node="n2"))
    p.update(record("c", "infra", node="n2"))
    line = p.line()
    assert line.startswith("[3/4] solved 1 | failures infra=1 model=1 |")
    assert line.endswith("| n1=1 n2=2")
    p.close()


def test_tampering_is_counted_by_layer_in_the_summary_and_metrics(tmp_path: pathlib.Path) -> None:
    w = RunWriter(tmp_path)
    canary = "canary tests/t.py::test_0a1b2c3d4e5f (a copy of tests/t.py::test_a) must fail but was recorded PASSED"
    w.add([sample("a")], record("a", "model", -1.0, tampering=[canary, canary]))
    w.add(
        [sample("b")], record("b", "model", tampering=["twin runs disagree on t: PASSED vs FAILED"])
    )
    w.add([sample("c")], record("c", "model", tampering=["pkg/x.py:3: calls os._exit"]))
    w.add([sample("d")], record("d", None, 1.0, tampering=[]))
    summary = w.summary()
    assert summary["tampering"] == 3
    assert summary["tampering_by_kind"] == {"canary": 1, "twin": 1, "screen": 1}
    assert summary["mean_reward"] == 0.0  # -1 + 0 + 0 + 1 over four graded rollouts
    prom = (tmp_path / "metrics.prom").read_text()
    assert 'coding_agent_rl_tampering_total{kind="canary"} 1.0' in prom
    assert 'coding_agent_rl_tampering_total{kind="twin"} 1.0' in prom
    w.close({})
