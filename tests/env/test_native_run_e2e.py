"""``coding-agent-rl run --agent native`` as a user runs it (the real command in a subprocess):
the replay policy solves every bundled task through the native loop in Docker; the output folder
has one sample per rollout with its turns; ``view`` renders the turns (checked in the page's
static HTML and, with the page's script run by headless Chromium, in the expanded rollout)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from support.dom import parse
from support.rollout_helpers import RUN_ID, TASKS, containers

from coding_agent_rl.types import Sample, Status

pytestmark = [pytest.mark.docker]
CLI = [sys.executable, "-m", "coding_agent_rl.cli"]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def run(rows, tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("native") / "out"
    proc = subprocess.run(
        [
            *CLI, "run", "--dataset", str(TASKS), "--agent", "native", "--policy", "replay",
            "--concurrency", "3", "--sandbox-option", f"run_id={RUN_ID}", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["solved"] == 6
    assert containers() == []
    return out


def read(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_replay_solves_every_task_natively(run):
    records, samples = read(run / "results.jsonl"), read(run / "samples.jsonl")
    assert len(records) == len(samples) == 6
    by_id = {s["rollout_id"]: Sample.from_dict(s) for s in samples}
    for r in records:
        assert r["agent"] == "native" and r["reward"] == 1.0 and r["failure_kind"] is None
        assert r["turns"] >= 2 and r["num_segments"] == 1
        m = r["metrics"]
        assert m["env_retries"] == 0 and m["truncation_reason"] is None
        assert m["end_reason"] == "done" and m["tokens_trained"] == m["tokens_sampled"] > 0
        for name in ("diff", "test_log", "agent_log"):
            assert (run / r["artifacts"][name]).is_file()
        assert "turn 0 · action" in (run / r["artifacts"]["agent_log"]).read_text()
        s = by_id[r["rollout_id"]]
        s.check()
        assert s.status == Status.COMPLETED and s.reward == 1.0
        assert s.metadata["segment"] == "final" and s.metadata["agent"] == "native"
        assert len(s.metadata["turns"]) == r["turns"]
        assert '"name": "bash"' in s.metadata["turns"][0]["action"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["agent"] == "native" and summary["solved"] == 6


def test_report_lists_the_turns(run, tmp_path):
    page = tmp_path / "report.html"
    proc = subprocess.run(
        [*CLI, "view", str(run), "-o", str(page)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    root, _ = parse(page.read_text())
    card = root.by_id("turns-card")
    assert "0 truncated" in card.text() and "0 env retries" in card.text()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if IN_CI:
            pytest.fail("CI=true but no chromium on PATH")
        pytest.skip("SKIPPED (no browser): the turns table is built by the page's script")
    dump = subprocess.run(
        [
            exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", "--virtual-time-budget=3000",
            page.as_uri() + "#expand-first",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert dump.returncode == 0, dump.stderr[-2000:]
    dom, _ = parse(dump.stdout)
    table = dom.find("table", cls="turns-table")
    rows = table.find("tbody").find_all("tr")
    first = read(run / "results.jsonl")[0]
    assert len(rows) == first["turns"]
    cells = rows[0].find_all("td")
    assert '"name": "bash"' in cells[1].text() and "[exit code 0]" in cells[2].text()
    assert "done" in rows[-1].classes
