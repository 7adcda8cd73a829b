"""Images for converted rows, in Docker: SWE-bench rows -> ``images build --repo-source`` (the
repository cloned with gitpython, set up as SWE-bench does, an isolated venv) -> ``validate``
(run's own workspace preparation, leak check, image source); ``--pull`` where no registry
answers; per-image failures as summary lines; bounded concurrency."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
from support.upstream import make_upstream, swebench_record

from coding_agent_rl.cli import main
from coding_agent_rl.datasets.schema import load_dataset

pytestmark = pytest.mark.docker
TEMPLATE = "coding-agent-rl/test-{id_1776}:latest"


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict:
    """An upstream repository, its SWE-bench row converted, the image built from source."""
    from coding_agent_rl.images.common import BASE_IMAGE, image_exists

    if not image_exists(BASE_IMAGE):
        pytest.fail(f"{BASE_IMAGE} is missing: run `coding-agent-rl images base` first")
    root = tmp_path_factory.mktemp("repo-images")
    up = make_upstream(root / "mirrors")
    src = root / "swebench.jsonl"
    src.write_text(json.dumps(swebench_record(up)) + "\n")
    rows = root / "rows.jsonl"
    assert (
        main(["convert", "--from", "swebench", str(src), str(rows), "--image-template", TEMPLATE])
        == 0
    )
    source = f"{root}/mirrors/{{owner}}+{{name}}"
    return {"root": root, "up": up, "rows": rows, "source": source}


def build(capsys, *argv: str) -> tuple[int, str]:
    rc = main(["images", "build", *argv])
    return rc, capsys.readouterr().out


def test_convert_build_validate(converted, capsys, tmp_path):
    rows, source = str(converted["rows"]), converted["source"]
    rc, out = build(capsys, "--dataset", rows, "--repo-source", source)
    assert rc == 0, out
    (row,) = load_dataset(rows)
    assert out.splitlines()[0].startswith(f"built   {row.image} (1 row): ")
    assert "1/1 images ready" in out
    t0 = time.monotonic()
    rc, out = build(capsys, "--dataset", rows, "--repo-source", source)
    assert rc == 0 and "up to date" in out and time.monotonic() - t0 < 5, out

    report = tmp_path / "report.jsonl"
    rc = main(["validate", "--dataset", rows, "--runs", "2", "--out", str(report)])
    out = capsys.readouterr().out
    assert rc == 0, out
    (r,) = [json.loads(line) for line in report.read_text().splitlines()]
    assert (r["valid"], r["image_source"], r["workspace"], r["leaks"]) == (True, "built", "ok", [])
    assert [g["reward"] for g in r["gold"]] == [1.0, 1.0] and len(r["noop"]) == 2
    assert "yes    built    none" in out


def test_the_venv_isolates_the_repository_from_system_packages(converted, capsys):
    """Debian's python3-pytest brings its own more_itertools: with the system interpreter the
    tests import that copy instead of the repository (defence off); the image's venv does not."""
    rows = str(converted["rows"])
    assert build(capsys, "--dataset", rows, "--repo-source", converted["source"])[0] == 0
    (row,) = load_dataset(rows)
    test = "tests/test_more.py::test_imports_the_repository"
    cmd = f"cd /testbed && {{}} -m pytest -q -p no:cacheprovider {test}"
    run = ["docker", "run", "--rm", "--network", "none", row.image, "bash", "-c"]
    system = subprocess.run([*run, cmd.format("/usr/bin/python3")], capture_output=True, text=True)
    venv = subprocess.run([*run, cmd.format("python3")], capture_output=True, text=True)
    assert system.returncode == 1 and "/usr/lib/python3/dist-packages" in system.stdout
    assert venv.returncode == 0, venv.stdout


def _variant(row: dict, **md) -> dict:
    row = json.loads(json.dumps(row))
    row["metadata"].update(md)
    row["label"] = row["metadata"]["instance_id"]
    return row


def test_per_image_failures_are_summary_lines(converted, capsys, tmp_path):
    good = json.loads(converted["rows"].read_text())
    rows = [
        good,
        _variant(good, instance_id="bad-base", image="coding-agent-rl/test-bad-base:latest",
                 base_commit="0123456789abcdef0123456789abcdef01234567"),
        _variant(good, instance_id="no-repo", image="coding-agent-rl/test-no-repo:latest",
                 repo="nobody/missing"),
    ]  # fmt: skip
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc, out = build(capsys, "--dataset", str(dataset), "--repo-source", converted["source"])
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith("built ") and "up to date" in lines[0]
    assert lines[1].startswith("failed  coding-agent-rl/test-bad-base:latest (1 row): ")
    assert "base_commit 0123456789abcdef0123456789abcdef01234567 is not in" in lines[1]
    assert (
        lines[2].startswith("failed  coding-agent-rl/test-no-repo:latest")
        and "cannot clone" in lines[2]
    )
    # Without a source the missing image is named with the way to provide it.
    rc, out = build(capsys, "--dataset", str(dataset))
    assert rc == 1
    assert out.splitlines()[0].startswith("built ")  # ours, present: nothing to do
    assert (
        "missing coding-agent-rl/test-bad-base:latest (1 row): not in the engine: "
        "pass --pull or --repo-source TEMPLATE" in out
    )
    assert out.splitlines()[-1] == "1/3 images ready"


def test_pull_without_a_reachable_registry_is_one_clear_line(converted, capsys, tmp_path):
    good = json.loads(converted["rows"].read_text())
    # A registry on a closed loopback port: the engine's pull fails at once, nothing leaves.
    image = "127.0.0.1:9/car-test/absent:latest"
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps(_variant(good, instance_id="pull-me", image=image)) + "\n")
    rc, out = build(capsys, "--dataset", str(dataset), "--pull")
    assert rc == 1
    (line, summary) = out.splitlines()
    assert line.startswith(f"failed  {image} (1 row): cannot pull {image}: "), line
    assert "Traceback" not in out and summary == "0/1 images ready"

    rc = main(["validate", "--dataset", str(dataset), "--runs", "1"])
    captured = capsys.readouterr()
    assert rc == 1 and "missing" in captured.out
    assert f"invalid: pull-me: image {image} not found: provide it with" in captured.err


def test_builds_run_at_most_concurrency_at_once(monkeypatch):
    """A stand-in for the builder (sleeps, counts how many run at once); images are missing."""
    import coding_agent_rl.images.repo as repo_images
    from coding_agent_rl.datasets.schema import TaskRow
    from coding_agent_rl.images.provision import provide_images

    running, peak, lock = [0], [0], threading.Lock()

    def fake_build(image, row, template, **kw):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return True, "stand-in"

    monkeypatch.setattr(repo_images, "build_repo_image", fake_build)
    rows = [
        TaskRow(instance_id=f"c{i}", image=f"coding-agent-rl/test-absent-{i}:latest",
                workdir="/testbed", problem_statement="p", repo="o/n", base_commit="abc")
        for i in range(6)
    ]  # fmt: skip
    reports = provide_images(rows, repo_source="/x/{repo}", concurrency=2, progress=lambda s: None)
    assert [r.source for r in reports] == ["built"] * 6 and peak[0] == 2
