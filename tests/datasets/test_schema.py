"""Row schema: the bundled examples load, slime's shapes are read, bad rows are named precisely."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from coding_agent_rl import settings
from coding_agent_rl.cli import main
from coding_agent_rl.datasets.schema import DatasetError, load_dataset
from coding_agent_rl.grading.protect import protected_patterns

EXAMPLES = (
    pathlib.Path(__file__).parents[2] / "coding_agent_rl" / "datasets" / "examples" / "tasks.jsonl"
)
GOOD = {
    "instance_id": "t1",
    "image": "img:1",
    "workdir": "/repo",
    "problem_statement": "fix it",
    "fail_to_pass": ["tests/test_a.py::test_x"],
}


def write(tmp_path, *rows) -> pathlib.Path:
    p = tmp_path / "data.jsonl"
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def test_bundled_examples_load():
    rows = load_dataset(EXAMPLES)
    assert len(rows) >= 6
    for row in rows:
        assert row.grader == "tests" and row.fail_to_pass and row.patch and row.test_patch
        assert row.build is not None and row.build.dockerfile.is_file()
        assert row.prompt == row.problem_statement  # the slime `prompt` key carries the same text
        assert any(f in row.test_patch for f in row.test_files)
        assert set(row.test_files) >= {t.split("::")[0] for t in row.fail_to_pass}


def test_test_ids_as_json_string_and_upper_case_keys(tmp_path):
    md = {
        **GOOD,
        "fail_to_pass": None,
        "FAIL_TO_PASS": '["tests/test_a.py::test_x[1-2]"]',
        "PASS_TO_PASS": "[]",
    }
    (row,) = load_dataset(write(tmp_path, {"prompt": "p", "metadata": md}))
    assert row.fail_to_pass == ("tests/test_a.py::test_x[1-2]",)
    assert row.test_files == ("tests/test_a.py",)


def test_slime_remote_env_info_shape(tmp_path):
    row_obj = {
        "prompt": [{"role": "user", "content": "the issue"}],
        "label": "inst-7",
        "metadata": {
            "remote_env_info": {
                "image_url": "reg/img:2",
                "workdir": "/w",
                "f2p_script": "import sys; sys.exit(0)",
                "pre_commands": ["echo a", "echo b"],
            }
        },
    }
    (row,) = load_dataset(write(tmp_path, row_obj))
    assert (row.instance_id, row.image, row.workdir) == ("inst-7", "reg/img:2", "/w")
    assert row.grader == "eval_cmd" and row.eval_script and row.problem_statement == "the issue"
    assert row.pre_commands == ("echo a", "echo b")


def test_slime_swepro_shape(tmp_path):
    (tmp_path / "run.sh").write_text("pytest $1")
    (tmp_path / "parse.py").write_text("print(1)")
    md = {
        "instance_id": "p1",
        "image": "i",
        "workdir": "/app",
        "problem_statement": "x",
        "swepro": {
            "fail_to_pass": '["a::b"]',
            "pass_to_pass": [],
            "selected_test_files": ["a"],
            "before_repo_set_cmd": "git checkout abc -- a",
            "run_script_path": "run.sh",
            "parser_script_path": "parse.py",
        },
    }
    (row,) = load_dataset(write(tmp_path, {"prompt": "x", "metadata": md}))
    assert row.log_parser == "swepro" and row.swepro_run_script == "pytest $1"
    assert row.test_files == ("a",) and row.pre_commands == ("git checkout abc -- a",)


@pytest.mark.parametrize(
    "row, problem",
    [
        ('{"prompt": "x", "metadata": ', "invalid JSON"),
        ({"metadata": {**GOOD, "image": None}}, "missing image"),
        ({"metadata": {**GOOD, "workdir": "relative"}}, "missing workdir"),
        ({"metadata": {**GOOD, "fail_to_pass": []}}, "no grading information"),
        ({"metadata": {**GOOD, "log_parser": "tap"}}, "unknown log_parser 'tap'"),
        ({"metadata": {**GOOD, "fail_to_pass": "not json"}}, "not a JSON list"),
        ({"metadata": {**GOOD, "hidden_paths": ["/repo/tests"]}}, "outside the workdir"),
        ({"metadata": {**GOOD, "patch_file": "nope.patch"}}, "patch_file 'nope.patch' not found"),
    ],
)
def test_bad_row_is_named_with_file_and_line(tmp_path, row, problem):
    path = write(tmp_path, {"metadata": GOOD}, row)
    with pytest.raises(DatasetError) as e:
        load_dataset(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:2: ") and problem in msg and "\n" not in msg


def test_duplicate_instance_ids(tmp_path):
    with pytest.raises(DatasetError, match=r":2: duplicate instance_id 't1' \(first on line 1\)"):
        load_dataset(write(tmp_path, {"metadata": GOOD}, {"metadata": GOOD}))


def test_cli_exits_2_with_one_line_and_no_traceback(tmp_path):
    path = write(tmp_path, {"metadata": {**GOOD, "image": ""}})
    entry = "import sys; from coding_agent_rl.cli import main; sys.exit(main())"
    r = subprocess.run(
        [sys.executable, "-c", entry, "validate", "--dataset", str(path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == f"coding-agent-rl validate: error: {path}:1: missing image"


def test_cli_unknown_instance(capsys):
    assert main(["validate", "--dataset", str(EXAMPLES), "--instance", "nope"]) == 2
    assert "no such instance_id" in capsys.readouterr().err


def test_protected_patterns_cover_test_files_and_their_shadows():
    row = load_dataset(EXAMPLES)[0]
    pats = protected_patterns(row)
    f = row.test_files[0]
    stem = f.rsplit(".", 1)[0]
    assert f"/{f}" in pats and f"/{stem}.*" in pats and f"/{stem}/" in pats
    assert "conftest.py" in pats and "pyproject.toml" in pats and "/.harness/" in pats


def test_row_from_a_slime_sample(monkeypatch):
    from coding_agent_rl.datasets.schema import row_from_sample
    from coding_agent_rl.types import Sample

    line = json.loads(EXAMPLES.read_text().splitlines()[0])
    sample = Sample(index=3, prompt=line["prompt"], label=line["label"], metadata=line["metadata"])
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(EXAMPLES.parent))
    row = row_from_sample(sample, base_dir=settings.load().dataset_dir)
    assert row.instance_id == line["label"] and row.patch and row.test_patch
    monkeypatch.delenv("CODING_AGENT_RL_DATASET_DIR")
    monkeypatch.chdir("/")
    with pytest.raises(
        DatasetError, match=r"sample 3: (problem_statement|patch)_file .* not found"
    ):
        row_from_sample(sample, base_dir=settings.load().dataset_dir)
