"""Each SWE-bench-family source from a small fixture written from its published schema
(tests/datasets/fixtures): the image-name convention, what is kept as data, and the errors that
name the fix (the log parser a row needs; a missing base_commit)."""

from __future__ import annotations

import json
import pathlib

import pytest

from coding_agent_rl.datasets.convert import convert_records
from coding_agent_rl.datasets.schema import load_dataset, parse_row

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def test_swebench_multimodal_keeps_image_links_as_data(tmp_path):
    rows, skipped = convert_records("swebench", FIXTURES / "swebench_multimodal.jsonl", tmp_path)
    (row,) = rows
    md = row["metadata"]
    assert md["image"] == "swebench/sweb.eval.x86_64.matplotlib_1776_matplotlib-26000:latest"
    assert md["problem_images"] == [
        "https://user-images.githubusercontent.com/1/legend.png",
        "https://example.invalid/after.jpg",
    ]
    assert md["image_assets"]["problem_statement"] == md["problem_images"][:1]
    assert "![screenshot](https://user-images" in md["problem_statement"]  # links stay in the text
    # The JS row: its test names are not pytest ids; the reason names SWE-bench's parser.
    (reason,) = skipped
    assert reason.startswith("chartjs__Chart.js-11116: test ids are not pytest node ids: ")
    assert "needs SWE-bench's log parser parse_log_chart_js: pip install swebench" in reason


def test_swe_gym_image_name_and_fields(tmp_path):
    (row,), _ = convert_records("swe-gym", FIXTURES / "swe_gym.jsonl", tmp_path)
    md = row["metadata"]
    assert md["image"] == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365:latest"
    assert (
        md["base_commit"] == "7f6c9cb1deafb280fe7fcc7551c38e397f11a706"
        and md["repo"] == "getmoto/moto"
    )
    assert md["test_cmd"].endswith("tests/test_dynamodb/test_dynamodb_update_expressions.py")


def test_swe_rebench_uses_its_image_test_command_and_install_config(tmp_path):
    rows, skipped = convert_records("swe-rebench", FIXTURES / "swe_rebench.jsonl", tmp_path)
    (row,) = rows
    md = row["metadata"]
    assert md["image"] == "swerebench/sweb.eval.x86_64.tox-dev_1776_tox-3846"  # the row's own
    assert md["install_config"]["install"] == "pip install -e .[testing]"  # kept for images build
    assert "pytest --no-header -rA --tb=line" in md["test_cmd"]
    assert md["test_cmd"].endswith("tests/tox_env/python/test_python_api.py")
    (reason,) = skipped  # vitest output: SWE-rebench says which parser it needs
    assert "vuejs__core-9001" in reason and "log parser parse_log_vitest" in reason
    # Without its own image name the convention applies.
    rec = json.loads((FIXTURES / "swe_rebench.jsonl").read_text().splitlines()[0])
    rec.pop("docker_image")
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps(rec) + "\n")
    (row,), _ = convert_records("swe-rebench", src, tmp_path)
    assert row["metadata"]["image"] == "swerebench/sweb.eval.x86_64.tox-dev_1776_tox-3846:latest"


def test_swe_rebench_recipe_comes_from_install_config(tmp_path):
    from coding_agent_rl.datasets.recipes import install_script, recipe_for

    (row,), _ = convert_records("swe-rebench", FIXTURES / "swe_rebench.jsonl", tmp_path)
    (tmp_path / "requirements.txt").write_text("pytest\n")
    recipe = recipe_for(row["metadata"], tmp_path)
    assert recipe.source == "install_config" and recipe.extras == ("testing",)
    assert recipe.packages == ("pytest", "pytest-mock")
    assert recipe.requirement_files == ("requirements.txt",)
    assert any("pre_install not run" in n for n in recipe.notes)
    script = install_script(recipe, "/testbed", "/tmp/w")
    assert "python3 -m venv --without-pip /opt/venv" in script
    assert script.rstrip().splitlines()[-2] == "pip install -e .[testing]"


def test_generic_recipe(tmp_path):
    from coding_agent_rl.datasets.recipes import generic

    assert generic(tmp_path).install == ""  # nothing to install
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname="x"\n[project.optional-dependencies]\ntests=["a"]\n'
    )
    (tmp_path / "requirements-dev.txt").write_text("a\n")
    r = generic(tmp_path)
    assert (r.install, r.extras, r.requirement_files) == (
        "python -m pip install -e '.[tests]'",
        ("tests",),
        ("requirements-dev.txt",),
    )


def test_missing_base_commit_is_named(tmp_path):
    rec = json.loads((FIXTURES / "swe_gym.jsonl").read_text())
    rec["base_commit"] = ""
    src = tmp_path / "g.jsonl"
    src.write_text(json.dumps(rec) + "\n")
    rows, skipped = convert_records("swe-gym", src, tmp_path)
    assert not rows and skipped == ["getmoto__moto-7365: missing base_commit"]


def test_a_non_pytest_test_command_names_the_parser_it_needs(tmp_path):
    row = {
        "metadata": {
            "instance_id": "django__django-11099",
            "repo": "django/django",
            "image": "i",
            "workdir": "/testbed",
            "problem_statement": "p",
            "test_cmd": "./tests/runtests.py --verbosity 2 auth_tests.test_validators",
            "fail_to_pass": [
                "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"
            ],
        }
    }
    with pytest.raises(ValueError) as info:
        parse_row(row, base_dir=tmp_path)
    assert "is not pytest and its test ids are not pytest node ids" in str(info.value)
    assert "parse_log_django" in str(info.value)
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"d\.jsonl:1: test_cmd"):
        load_dataset(dataset)
    row["metadata"]["log_parser"] = "swebench"  # the fix the message names
    assert parse_row(row, base_dir=tmp_path).log_parser == "swebench"
