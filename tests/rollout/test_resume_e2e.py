"""``run`` killed with SIGKILL mid-run, then ``run --resume`` on the same folder: every rollout
ends exactly once, the killed run's sandboxes are gone, a rollout whose latest record is an
infrastructure failure is re-run up to ``--resume-attempts`` records, and no sample is written
twice. Real components: the command in subprocesses, the Docker engine, Claude Code, the replay
policy, grading in a clean sandbox; a row whose image does not exist fails as ``infra`` for real.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from support.rollout_helpers import TASKS, containers, dataset_lines, reap

from coding_agent_rl import settings
from coding_agent_rl.types import Sample

pytestmark = [pytest.mark.docker, pytest.mark.agents]

CLI = [sys.executable, "-m", "coding_agent_rl.cli"]
BROKEN = "example__missing_image"


def read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start(dataset: pathlib.Path, out: pathlib.Path, run_id: str, *args: str) -> subprocess.Popen:
    with (out.parent / f"{out.name}-{run_id}.log").open("w") as log:  # the child keeps its copy
        return subprocess.Popen(
            [*CLI, "run", "--dataset", str(dataset), "--out", str(out), "--policy", "replay",
             "--sandbox-option", f"run_id={run_id}", "--agent-budget", "300",
             "--eval-timeout", "120", "--concurrency", "2", *args],
            stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip


def finish(proc: subprocess.Popen, out: pathlib.Path, run_id: str) -> dict[str, Any]:
    try:
        stdout, _ = proc.communicate(timeout=900)
    finally:
        reap(proc)
    log = (out.parent / f"{out.name}-{run_id}.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture
def dataset(tmp_path: pathlib.Path, example_images: None) -> pathlib.Path:
    """A row whose image is missing (first: it fails fast), then three example tasks."""
    lines = dataset_lines()
    broken = json.loads(json.dumps(lines["slugify"]))
    broken["label"] = broken["metadata"]["instance_id"] = BROKEN
    broken["metadata"]["image"] = f"coding-agent-rl/missing-{uuid.uuid4().hex[:8]}:none"
    rows = [broken, lines["slugify"], lines["pager"], lines["daterange"]]
    for row in rows:  # the example files are named relative to the examples' folder
        md = row["metadata"]
        for key in ("problem_statement_file", "patch_file", "test_patch_file"):
            if md.get(key):
                md[key] = str(TASKS.parent / md[key])
        md.pop("build", None)  # images are built already (example_images)
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sigkill_then_resume_completes_every_rollout_once_and_leaves_no_orphan(
    dataset: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    killed_id, resumed_id = f"killed-{uuid.uuid4().hex[:8]}", f"resumed-{uuid.uuid4().hex[:8]}"
    n_rows = len(dataset.read_text().splitlines())
    proc = start(dataset, out, killed_id)
    try:
        # Kill once a rollout was graded while sandboxes of the others are live.
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            done = read_jsonl(out / "results.jsonl") if (out / "results.jsonl").exists() else []
            if any(r.get("reward") == 1.0 for r in done) and containers(killed_id):
                break
            time.sleep(0.5)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        reap(proc)
    before = read_jsonl(out / "results.jsonl")
    assert 1 <= len({(r["instance_id"], r["sample_index"]) for r in before}) < n_rows
    assert containers(killed_id), "SIGKILL left the in-flight rollouts' sandboxes behind"
    disks = settings.current().disk_dir / killed_id

    printed = finish(start(dataset, out, resumed_id, "--resume"), out, resumed_id)

    # The killed run's sandboxes (and their capped disks) were reaped; the resumed run's closed.
    assert containers(killed_id) == [] and not disks.exists()
    assert containers(resumed_id) == []
    results = read_jsonl(out / "results.jsonl")
    assert results[: len(before)] == before  # every earlier record kept
    by_key: dict[tuple[str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    for r in results:
        by_key[(r["instance_id"], r["sample_index"])].append(r)
    assert len(by_key) == n_rows
    for (iid, _), records in by_key.items():
        assert [r["attempt"] for r in records] == list(range(1, len(records) + 1))
        if iid == BROKEN:  # an infra failure each time: re-run once, then final (2 attempts)
            assert [r["failure_kind"] for r in records] == ["infra", "infra"]
            assert records[-1]["infra_stage"] and "not found" in records[-1]["abort_reason"]
        else:  # graded exactly once
            assert len(records) == 1 and records[0]["reward"] == 1.0, records
        assert all(r["node"] == socket.gethostname() for r in records)  # the default node
    samples = [Sample.from_dict(d) for d in read_jsonl(out / "samples.jsonl")]
    per_key = collections.Counter((s.metadata["instance_id"], s.index) for s in samples)
    assert set(per_key) == {k for k in by_key if k[0] != BROKEN}
    for key, n in per_key.items():
        assert n == by_key[key][-1]["num_segments"]  # one rollout's samples, once
    summary = json.loads((out / "summary.json").read_text())
    assert printed["total"] == summary["total"] == n_rows  # each rollout once, by its latest
    assert summary["solved"] == n_rows - 1 and summary["infra_failures"] == 1
    assert summary["samples"] == len(samples)
    assert summary["rollouts_by_node"] == {socket.gethostname(): n_rows}

    # The cap: a third run re-runs nothing (the broken row has its 2 attempts).
    again = f"again-{uuid.uuid4().hex[:8]}"
    printed = finish(start(dataset, out, again, "--resume"), out, again)
    assert read_jsonl(out / "results.jsonl") == results
    assert printed["total"] == n_rows
