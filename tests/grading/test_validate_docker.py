"""`coding-agent-rl validate` in Docker: the bundled tasks are valid; broken rows are named."""

from __future__ import annotations

import json
import pathlib

import pytest

from coding_agent_rl.cli import main
from coding_agent_rl.grading.validate import RowReport, _disagree

EXAMPLES = pathlib.Path(__file__).parents[2] / "coding_agent_rl" / "datasets" / "examples"


@pytest.mark.docker
@pytest.mark.usefixtures("example_images")
def test_every_bundled_task_is_valid(tmp_path, capsys):
    out = tmp_path / "report.jsonl"
    rc = main(
        [
            "validate",
            "--dataset",
            str(EXAMPLES / "tasks.jsonl"),
            "--out",
            str(out),
            "--concurrency",
            "2",
            "--runs",
            "2",
        ]
    )
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    reports = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(reports) >= 6 and all(r["valid"] for r in reports)
    assert all((len(r["gold"]), len(r["noop"])) == (2, 2) for r in reports), reports[0]
    assert f"{len(reports)}/{len(reports)} rows valid" in stdout
    # Graded through the grader's plugin, with canaries; the tamper screen flags no gold patch.
    assert all(
        g["result_method"] == "plugin" and g["canaries"] >= 3 for r in reports for g in r["gold"]
    )
    assert all(r["screen_fp"] == 0 for r in reports)
    assert "tamper-screen false positives on gold patches: 0" in stdout


@pytest.mark.docker
@pytest.mark.usefixtures("example_images")
def test_broken_rows_are_named_with_their_reason(tmp_path, capsys):
    rows = {
        json.loads(line)["metadata"]["instance_id"]: json.loads(line)
        for line in (EXAMPLES / "tasks.jsonl").read_text().splitlines()
    }

    def variant(name: str, new_id: str, **changes) -> dict:
        row = json.loads(json.dumps(rows[f"example__{name}"]))
        md = row["metadata"]
        md.update(instance_id=new_id, **changes)
        for key in ("patch_file", "test_patch_file", "problem_statement_file"):
            md[key] = str(EXAMPLES / md[key])
        md.pop("build")
        if "patch" in changes:
            md.pop("patch_file")
        return row

    pager = rows["example__pager"]["metadata"]
    broken = [
        variant(
            "pager", "gold-does-not-fix", patch=(EXAMPLES / "money" / "gold.patch").read_text()
        ),
        variant(
            "pager",
            "f2p-passes-already",
            fail_to_pass=pager["fail_to_pass"] + [pager["pass_to_pass"][0]],
        ),
        variant(
            "editor",
            "gold-edits-a-test",
            patch=(EXAMPLES / "editor" / "gold.patch").read_text()
            + (EXAMPLES / "editor" / "tests.patch")
            .read_text()
            .replace("+def test_new", "+def test_x"),
        ),
        variant("daterange", "still-fine"),
        variant(
            "slugify",
            "gold-looks-like-tampering",
            patch=(EXAMPLES / "slugify" / "gold.patch").read_text()
            + "diff --git a/textkit/cleanup.py b/textkit/cleanup.py\nnew file mode 100644\n"
            "--- /dev/null\n+++ b/textkit/cleanup.py\n@@ -0,0 +1,3 @@\n+import gc\n"
            "+gc.get_objects()\n+gc.get_referrers()\n",
        ),
    ]
    dataset = tmp_path / "broken.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in broken))
    rc = main(["validate", "--dataset", str(dataset), "--runs", "1"])
    captured = capsys.readouterr()
    assert rc == 1
    err = captured.err
    assert "invalid: gold-does-not-fix: " in err
    assert "invalid: f2p-passes-already: fail-to-pass test passes without the gold patch" in err
    assert (
        "invalid: gold-edits-a-test: gold patch changes protected paths: tests/test_buffer.py"
        in err
    )
    assert (
        "invalid: gold-looks-like-tampering: the tamper screen flags the gold patch: "
        "textkit/cleanup.py:2: walks live objects (gc.get_objects)" in err
    )
    assert "still-fine" not in err and "1/5 rows valid" in captured.out
    assert "tamper-screen false positives on gold patches: 2" in captured.out


def test_flaky_detection_compares_pass_fail_per_test():
    def run(status, reward=0.0):
        return {"tests": {"t::a": status}, "reward": reward}

    steady = RowReport(
        "x", noop=[run("FAILED"), run("ERROR")], gold=[run("PASSED", 1), run("PASSED", 1)]
    )
    flaky = RowReport(
        "y", noop=[run("FAILED"), run("FAILED")], gold=[run("PASSED", 1), run("FAILED")]
    )
    assert not _disagree(steady) and _disagree(flaky)
