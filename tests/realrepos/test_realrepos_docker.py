"""Seven real bug-fix rows (``../shared/realrepos``: starlette, pyparsing, prettytable, attrs,
structlog, click, quart), each declaring its test environment its own way: converted, built
with ``images build --repo-source`` from the bundles cloned as mirrors (concurrency 2), and
validated (gold passes F2P and P2P, the no-op fails F2P). The images are shared by the module."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

from coding_agent_rl.cli import main
from coding_agent_rl.datasets.schema import load_dataset

pytestmark = pytest.mark.docker
REALREPOS = pathlib.Path(__file__).resolve().parents[2] / ".." / "shared" / "realrepos"
TEMPLATE = "coding-agent-rl/test-realrepos-{id_1776}:latest"
IDS = [
    "encode__starlette-2716",
    "pyparsing__pyparsing-600",
    "jazzband__prettytable-299",
    "python-attrs__attrs-1513",
    "hynek__structlog-747",
    "pallets__click-3678",
    "pallets__quart-cb4d1b6",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The rows converted and every image built (its summary, logs and records kept)."""
    from coding_agent_rl.images.common import BASE_IMAGE, image_exists

    if not (REALREPOS / "swebench.jsonl").is_file():
        pytest.fail(f"{REALREPOS} is missing (CI provides ../shared)")
    if not image_exists(BASE_IMAGE):
        pytest.fail(f"{BASE_IMAGE} is missing: run `coding-agent-rl images base` first")
    root = tmp_path_factory.mktemp("realrepos")
    for bundle in sorted((REALREPOS / "mirrors").glob("*.bundle")):
        dest = root / "mirror" / bundle.stem / "repo"
        subprocess.run(["git", "clone", "-q", "--mirror", str(bundle), str(dest)], check=True)
    rows = root / "tasks.jsonl"
    argv = ["convert", "--from", "swebench", "--image-template", TEMPLATE]
    assert main([*argv, str(REALREPOS / "swebench.jsonl"), str(rows)]) == 0
    source = f"{root}/mirror/{{owner}}+{{name}}/repo"
    build = ["images", "build", "--dataset", str(rows), "--repo-source", source, "--rebuild"]
    rc = main([*build, "--concurrency", "2"])  # rebuilt: each build writes its record
    return {"root": root, "rows": rows, "rc": rc, "source": source}


def record(built: dict, instance_id: str) -> dict:
    (row,) = [r for r in load_dataset(built["rows"]) if r.instance_id == instance_id]
    from coding_agent_rl.images.repo import slug

    path = built["rows"].with_name("tasks.build-logs") / f"{slug(row.image)}.environment.json"
    return json.loads(path.read_text())


def installed(built: dict, instance_id: str) -> dict[str, dict]:
    return {p["name"].lower(): p for p in record(built, instance_id)["installed"]}


def test_every_image_builds(built):
    assert built["rc"] == 0


@pytest.mark.parametrize("instance_id", IDS)
def test_the_row_validates(built, instance_id, tmp_path, capsys):
    out = tmp_path / "report.jsonl"
    argv = ["validate", "--dataset", str(built["rows"]), "--runs", "1", "--out", str(out)]
    rc = main([*argv, "--instance", instance_id])
    printed = capsys.readouterr().out
    (report,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (rc, report["valid"]) == (0, True), printed
    (row,) = [r for r in load_dataset(built["rows"]) if r.instance_id == instance_id]
    (gold,), (noop,) = report["gold"], report["noop"]
    assert all(gold["tests"].get(t) == "PASSED" for t in row.fail_to_pass + row.pass_to_pass)
    assert not any(noop["tests"].get(t) == "PASSED" for t in row.fail_to_pass)


def test_starlette_installs_its_requirements_file_relative_to_the_repository(built):
    """``-e .[full]`` is starlette itself with its extra; mkautodoc (sdist only) was built."""
    got = installed(built, "encode__starlette-2716")
    assert got["starlette"]["from"] == ["the repository[full]"]
    assert "itsdangerous" in got and "python-multipart" in got  # from the [full] extra
    assert got["mkautodoc"]["version"] == "0.2.0"
    assert record(built, "encode__starlette-2716")["built_from_sdist"] == ["mkautodoc==0.2.0"]
    assert got["pytest"]["version"] == "8.3.3" and got["trio"]["version"] == "0.26.2"


def test_quart_gets_its_locks_pins(built):
    got = installed(built, "pallets__quart-cb4d1b6")
    versions = {n: got[n]["version"] for n in ("click", "flask", "werkzeug", "pytest")}
    assert versions == {"click": "8.2.1", "flask": "3.1.1", "werkzeug": "3.1.3", "pytest": "8.4.0"}
    assert got["click"]["from"] == ["click==8.2.1 (uv.lock)"]


def test_dependency_groups_and_tox_deps_are_installed(built):
    assert "pytest-asyncio" in installed(built, "hynek__structlog-747")
    attrs = installed(built, "python-attrs__attrs-1513")
    assert {"hypothesis", "pympler", "cloudpickle", "pytest-xdist"} <= set(attrs)
    assert attrs["pytest"]["version"] == "9.0.2"  # uv.lock
    pyparsing = installed(built, "pyparsing__pyparsing-600")
    assert {"matplotlib", "railroad-diagrams", "jinja2"} <= set(pyparsing)


def test_gold_replays_to_full_reward_through_claude_code(built):
    """``run`` with real Claude Code: the replay policy applies each gold patch through the
    agent's own shell tool; every row is graded 1.0 by the default grader (blinding, canaries,
    the grader's equality, the screen) and nothing is left running."""
    import sys

    from support.rollout_helpers import RUN_ID, containers

    out = built["root"] / "replay"
    argv = [sys.executable, "-m", "coding_agent_rl.cli", "run", "--dataset", str(built["rows"])]
    argv += ["--policy", "replay", "--concurrency", "2", "--out", str(out)]
    argv += ["--sandbox-option", f"run_id={RUN_ID}", "--agent-budget", "600"]
    proc = subprocess.run([*argv, "--eval-timeout", "600"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    got = {
        r["instance_id"]: (r["reward"], r["failure_kind"], r.get("fail_reason")) for r in results
    }
    assert got == {i: (1.0, None, got.get(i, (0, 0, None))[2]) for i in IDS}, got
    assert containers() == []
