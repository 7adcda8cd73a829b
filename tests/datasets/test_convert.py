"""Converters on records written in each source's real schema (field names as published)."""

from __future__ import annotations

import json
import pathlib
import textwrap

import pytest

from coding_agent_rl.cli import main
from coding_agent_rl.datasets.convert import convert_records
from coding_agent_rl.datasets.schema import load_dataset
from coding_agent_rl.patches.reverse import reverse_patch

# A SWE-smith bug patch (introduces the bug into textkit/case.py of the slugify example).
SMITH_BUG = "\n".join(
    [
        "diff --git a/textkit/case.py b/textkit/case.py",
        "--- a/textkit/case.py",
        "+++ b/textkit/case.py",
        '@@ -5,4 +5,4 @@ _BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")',
        " ",
        " def camel_to_snake(name: str) -> str:",
        '     """``HTTPServerError`` -> ``http_server_error``."""',
        '-    return _BOUNDARY.sub("_", name).lower()',
        '+    return _BOUNDARY.sub("", name).lower()',
        "",
    ]
)


def write_jsonl(path: pathlib.Path, records: list[dict]) -> pathlib.Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run_cli(*argv: str) -> int:
    return main(["convert", *argv])


def test_swebench_jsonl(tmp_path, swebench_records, capsys):
    src = write_jsonl(tmp_path / "swebench.jsonl", swebench_records)
    out = tmp_path / "out" / "rows.jsonl"
    assert run_cli("--from", "swebench", str(src), str(out)) == 0
    captured = capsys.readouterr()
    assert "wrote 1 rows" in captured.out
    assert "django__django-11099: test ids are not pytest node ids" in captured.err
    assert "needs SWE-bench's log parser parse_log_django: pip install swebench" in captured.err
    (row,) = load_dataset(out)
    assert row.image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert row.workdir == "/testbed" and row.base_commit.startswith("d16bfe05")
    assert row.fail_to_pass == (
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]",
    )
    assert row.test_files == ("astropy/modeling/tests/test_separable.py",)
    assert "conda activate testbed" in row.test_cmd and row.test_cmd.endswith("test_separable.py")


def test_swebench_parquet_and_image_template(tmp_path, swebench_records):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "data" / "test-00000-of-00001.parquet"
    src.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(swebench_records[:1]), src)
    rows, skipped = convert_records(
        "swebench", src.parent, tmp_path, image_template="registry.local/{id_1776}:v1"
    )
    assert (
        not skipped
        and rows[0]["metadata"]["image"] == "registry.local/astropy_1776_astropy-12907:v1"
    )


def test_swe_gym_image_convention(tmp_path, swebench_records):
    rec = {**swebench_records[0], "instance_id": "getmoto__moto-7365", "repo": "getmoto/moto"}
    rows, _ = convert_records("swe-gym", write_jsonl(tmp_path / "g.jsonl", [rec]), tmp_path)
    assert rows[0]["metadata"]["image"] == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365:latest"


def smith_record() -> dict:
    return {
        "instance_id": "textkit__textkit.0a1b2c3d.func_pm_remove_assign__x1",
        "repo": "swesmith/textkit__textkit.0a1b2c3d",
        "patch": SMITH_BUG,
        "FAIL_TO_PASS": [
            "tests/test_textkit.py::test_camel_to_snake[HTTPServerError-http_server_error]",
            "tests/test_textkit.py::test_camel_to_snake[camelCase-camel_case]",
        ],
        "PASS_TO_PASS": [
            "tests/test_textkit.py::test_simple_words",
            "tests/test_textkit.py::test_camel_to_snake[simple-simple]",
        ],
        "created_at": "2025-03-14T00:00:00",
        "image_name": "swesmith.x86_64.textkit__textkit.0a1b2c3d",
        "base_commit": "0a1b2c3d",
        "problem_statement": "camel_to_snake drops the underscores",
    }


def test_swe_smith(tmp_path):
    rows, skipped = convert_records(
        "swe-smith", write_jsonl(tmp_path / "s.jsonl", [smith_record()]), tmp_path
    )
    assert not skipped
    md = rows[0]["metadata"]
    assert md["image"] == "jyangballin/swesmith.x86_64.textkit_1776_textkit.0a1b2c3d:latest"
    assert md["patch"] == reverse_patch(SMITH_BUG)  # gold = the bug undone
    assert "git checkout -q --orphan" in md["pre_commands"]  # history restarts at the buggy tree


def test_r2e_gym_split_from_the_pre_fix_log(tmp_path):
    old_log = textwrap.dedent("""\
        ============================= short test summary info ==============================
        FAILED r2e_tests/test_1.py::TestParse::test_new - AssertionError
        PASSED r2e_tests/test_1.py::TestParse::test_old
        ========================= 1 failed, 1 passed in 0.20s ==========================
    """)
    rec = {
        "repo_name": "aiohttp",
        "docker_image": "namanjain12/aiohttp_final:f0d74880deec8fcd",
        "commit_hash": "f0d74880deec8fcd",
        "problem_statement": "[ISSUE]\nParsing fails\n[/ISSUE]",
        "expected_output_json": json.dumps(
            {
                "TestParse.test_new": "PASSED",
                "TestParse.test_old": "PASSED",
                "TestParse.test_broken": "FAILED",
            }
        ),
        "execution_result_content": json.dumps(
            {"old_commit_res_out": old_log, "new_commit_res_out": ""}
        ),
        "prompt": "SECRET GOLD PATCH inside the generation prompt",
        "parsed_commit_content": "{}",
    }
    rows, skipped = convert_records("r2e-gym", write_jsonl(tmp_path / "r.jsonl", [rec]), tmp_path)
    assert not skipped
    row = rows[0]
    md = row["metadata"]
    assert md["image"] == rec["docker_image"] and md["log_parser"] == "r2e"
    assert (md["fail_to_pass"], md["pass_to_pass"]) == (
        ["TestParse.test_new"],
        ["TestParse.test_old"],
    )
    assert md["problem_statement"] == "Parsing fails" and "SECRET" not in json.dumps(row)
    assert md["hidden_paths"] == ["/r2e_tests"]


def write_harbor_task(root: pathlib.Path, name: str = "fix-greeting") -> pathlib.Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "instruction.md").write_text("`greet('Ada')` must return `Hello, Ada!` (it says Hi).\n")
    (task / "task.toml").write_text(
        textwrap.dedent(f"""\
        version = "1.0"
        [task]
        name = "examples/{name}"
        [metadata]
        difficulty = "easy"
        [verifier]
        timeout_sec = 60.0
        [agent]
        timeout_sec = 300.0
    """)
    )
    (task / "environment" / "Dockerfile").write_text(
        textwrap.dedent("""\
        FROM coding-agent-rl/base:latest
        WORKDIR /app
        COPY greet.py /app/greet.py
    """)
    )
    (task / "environment" / "greet.py").write_text("def greet(name):\n    return f'Hi, {name}!'\n")
    (task / "tests" / "test_greet.py").write_text(
        "from greet import greet\n\n\ndef test_greet():\n    assert greet('Ada') == 'Hello, Ada!'\n"
    )
    (task / "tests" / "test.sh").write_text(
        textwrap.dedent("""\
        #!/bin/bash
        cd /app
        if python3 -m pytest -q -p no:cacheprovider /tests/test_greet.py; then r=1; else r=0; fi
        echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
    """)
    )
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nsed -i 's/Hi, /Hello, /' /app/greet.py\n"
    )
    return task


def test_harbor_task_directory(tmp_path):
    write_harbor_task(tmp_path / "tasks")
    out = tmp_path / "out" / "harbor.jsonl"
    assert run_cli("--from", "harbor", str(tmp_path / "tasks"), str(out)) == 0
    (row,) = load_dataset(out)
    assert row.grader == "harbor" and row.instance_id == "examples/fix-greeting"
    assert row.image == "harbor/fix-greeting:latest" and row.workdir == "/app"
    assert row.build is not None and row.build.dockerfile.name == "Dockerfile"
    assert row.test_timeout == 60.0 and "sed -i" in row.metadata["solution_script"]
    assert (row.harbor_tests_dir / "test.sh").is_file()


def test_unconvertible_input_exits_nonzero(tmp_path, capsys):
    src = write_jsonl(tmp_path / "x.jsonl", [{"instance_id": "a"}])
    assert run_cli("--from", "swe-smith", str(src), str(tmp_path / "o.jsonl")) == 1
    assert "missing image_name" in capsys.readouterr().err
    assert (
        run_cli("--from", "swebench", str(tmp_path / "missing.jsonl"), str(tmp_path / "o.jsonl"))
        == 2
    )


# ---- end to end in Docker: converted rows validate through the real grading path ----


@pytest.mark.docker
@pytest.mark.usefixtures("example_images")
async def test_swe_smith_row_validates_and_hides_the_fix(tmp_path):
    from coding_agent_rl.grading.validate import validate_row
    from coding_agent_rl.grading.workspace import prepare_workspace
    from coding_agent_rl.sandbox import create_sandbox

    src = write_jsonl(tmp_path / "smith.jsonl", [smith_record()])
    out = tmp_path / "rows.jsonl"
    assert (
        run_cli(
            "--from",
            "swe-smith",
            str(src),
            str(out),
            "--image-template",
            "coding-agent-rl/example-slugify:latest",
        )
        == 0
    )
    (row,) = load_dataset(out)
    report = await validate_row(row, runs=1)
    assert report.valid, report.reason
    async with create_sandbox("docker", image=row.image, network="none") as sb:
        await prepare_workspace(sb, row, agent=True)
        r = await sb.exec("cd /testbed && git log --all --oneline | wc -l && git log -p --all")
        assert r.stdout.splitlines()[0] == "1"  # one commit: the buggy tree, no way to diff it away
        assert '"_", name' not in r.stdout.split("\n", 1)[1].split("textkit/case.py")[0]


@pytest.mark.docker
async def test_harbor_task_builds_and_validates_with_its_solution(tmp_path):
    from coding_agent_rl.grading.validate import validate_row
    from coding_agent_rl.images.dataset import build_dataset_images

    write_harbor_task(tmp_path / "tasks", name="car-test-greeting")
    out = tmp_path / "harbor.jsonl"
    assert run_cli("--from", "harbor", str(tmp_path / "tasks"), str(out)) == 0
    try:
        assert build_dataset_images(out) == ["harbor/car-test-greeting:latest"]
        (row,) = load_dataset(out)
        report = await validate_row(row, runs=1)
        assert report.valid, report.reason
        assert report.gold[0]["reward"] == 1.0 and report.noop[0]["reward"] == 0.0
    finally:
        import subprocess

        subprocess.run(
            ["docker", "rmi", "-f", "harbor/car-test-greeting:latest"], capture_output=True
        )
