"""grade() through real Docker on the bundled example tasks: rewards, the apply ladder, and the
infra-vs-model classification of every failure path."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import textwrap

import pytest

from coding_agent_rl.datasets.schema import parse_row
from coding_agent_rl.grading.grade import grade

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]


async def test_gold_solves_and_noop_does_not(example_rows):
    row = example_rows["slugify"]
    gold = await grade(row, row.patch)
    assert (gold.reward, gold.failure_kind, gold.apply_method) == (1.0, None, "git apply")
    assert gold.f2p_passed == gold.f2p_total == len(row.fail_to_pass)
    assert gold.p2p_passed == gold.p2p_total == len(row.pass_to_pass)
    assert gold.protected_paths_touched == [] and gold.duration_s > 0

    noop = await grade(row, "", allow_empty=True)
    assert (noop.reward, noop.failure_kind) == (0.0, "model")
    assert all(noop.tests[t] == "FAILED" for t in row.fail_to_pass)
    assert all(noop.tests[t] == "PASSED" for t in row.pass_to_pass)
    assert "short test summary info" in noop.test_log


async def test_empty_and_oversized_diffs_are_model_failures_without_a_sandbox(example_rows):
    row = example_rows["slugify"]
    assert (await grade(row, "")).reason == "empty diff"
    big = await grade(row, row.patch, max_diff_bytes=10)
    assert big.failure_kind == "model" and "over the 10-byte cap" in big.reason


async def test_ladder_falls_back_when_context_drifted(example_rows):
    row = example_rows["pager"]
    # The context line above the change no longer matches the base: plain `git apply` fails.
    drifted = row.patch.replace(
        "     start = (number - 1) * per_page", "     start = (number-1) * per_page"
    )
    assert drifted != row.patch
    result = await grade(row, drifted)
    assert result.apply_method in ("git apply --3way", "patch --fuzz")
    assert result.reward == 1.0


async def test_diff_that_does_not_apply_is_a_model_failure(example_rows):
    row = example_rows["money"]
    bogus = row.patch.replace("from decimal import Decimal", "from fractions import Fraction")
    result = await grade(row, bogus)
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert "does not apply" in result.reason and "git apply" in result.test_log


async def test_test_patch_that_does_not_apply_is_infra(example_rows):
    row = example_rows["editor"]
    # It edits a file the base does not have: neither git apply nor patch --fuzz can apply it.
    broken = dataclasses.replace(
        row, test_patch=row.test_patch.replace("test_buffer.py", "test_gone.py")
    )
    result = await grade(broken, row.patch)
    assert result.failure_kind == "infra" and "test_patch does not apply" in result.reason
    # The diff went in first: the control reset, without it, fails too (the task's fault).
    assert result.control == "fresh sandbox: the reset fails there too (WorkspaceError)"
    assert result.grader_error is None


async def test_missing_image_is_infra(example_rows):
    row = dataclasses.replace(example_rows["editor"], image="coding-agent-rl/no-such-image:latest")
    result = await grade(row, row.patch)
    assert result.failure_kind == "infra" and result.reward == 0.0
    assert "no-such-image" in result.reason


async def test_agent_code_that_hangs_the_tests_is_a_model_failure(example_rows, make_diff):
    row = example_rows["slugify"]
    slug = (row.build.context / "repo" / "textkit" / "slug.py").read_text()
    hang = make_diff(
        "slugify",
        {"textkit/slug.py": slug.replace('    """', '    while True:\n        pass\n    """', 1)},
    )
    result = await grade(row, hang, timeout=8)
    assert result.failure_kind == "model" and result.timed_out
    assert "timed out" in result.reason and "without the agent's changes they run" in result.reason


async def test_agent_code_that_kills_the_test_process_is_a_model_failure(example_rows, make_diff):
    row = example_rows["slugify"]
    diff = make_diff("slugify", {"textkit/case.py": "import os\nos._exit(0)\n"})
    # Through the channel an exit is not a screen matter (it forges nothing): the run itself
    # shows it, no final record, and a control run in a fresh sandbox proves the harness works.
    result = await grade(row, diff)
    assert (result.reward, result.failure_kind, result.screen_findings) == (0.0, "model", [])
    assert "final result record never arrived (exit 0)" in result.reason
    assert result.control == "fresh sandbox: a result"


async def test_a_test_command_that_never_reports_is_infra(example_rows):
    row = dataclasses.replace(example_rows["slugify"], test_cmd="echo no tests here")
    result = await grade(row, row.patch)
    assert result.failure_kind == "infra" and "also without the agent's changes" in result.reason


async def test_junit_parser(example_rows):
    row = dataclasses.replace(example_rows["daterange"], log_parser="junit")
    gold = await grade(row, row.patch)
    assert gold.reward == 1.0, gold.reason
    noop = await grade(row, "", allow_empty=True)
    assert noop.reward == 0.0 and noop.f2p_passed == 0 and noop.p2p_passed == noop.p2p_total


async def test_eval_cmd_grader_resets_test_files(example_rows, make_diff):
    base = example_rows["slugify"]
    row = dataclasses.replace(
        base,
        fail_to_pass=(),
        pass_to_pass=(),
        log_parser="pytest",
        eval_cmd="python3 -m pytest -q -p no:cacheprovider tests/test_textkit.py",
    )
    assert row.grader == "eval_cmd"
    assert (await grade(row, row.patch)).reward == 1.0
    # slime's eval_cmd path kept the agent's edits to tests; here they are dropped and reset.
    hack = make_diff("slugify", {"tests/test_textkit.py": "def test_ok():\n    pass\n"})
    result = await grade(row, hack)
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert result.protected_paths_touched == ["tests/test_textkit.py"]


SWEPRO_PARSER = """import json, re, sys
log, _, out = sys.argv[1:4]
tests = [{"name": m[2], "status": m[1]}
         for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\\S+)", open(log).read(), re.M)]
json.dump({"tests": tests}, open(out, "w"))
"""


async def test_task_scripts_f2p_and_swepro(example_rows):
    # The task's own scripts (slime's f2p_script; SWE-bench-Pro's run and parser scripts) come
    # with the grading sandbox's bundle and grade the gold patch and an empty diff apart.
    base = example_rows["slugify"]
    f2p = dataclasses.replace(
        base,
        fail_to_pass=(),
        pass_to_pass=(),
        eval_script="import os, sys, pytest\nsys.path.insert(0, os.getcwd())\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/test_textkit.py']))\n",
    )
    only_ids = [t for t in base.fail_to_pass if " " not in t]  # the parser splits on spaces
    swepro = dataclasses.replace(
        base,
        log_parser="swepro",
        fail_to_pass=tuple(only_ids),
        pass_to_pass=(),
        swepro_run_script='python3 -m pytest -rA -p no:cacheprovider "${1//,/ }"\n',
        swepro_parser_script=SWEPRO_PARSER,
    )
    assert f2p.grader == "eval_cmd" and only_ids
    for row in (f2p, swepro):
        gold, noop = await asyncio.gather(grade(row, row.patch), grade(row, "", allow_empty=True))
        assert gold.reward == 1.0, (row.log_parser, gold.reason, gold.test_log[-800:])
        assert (noop.reward, noop.failure_kind) == (0.0, "model"), noop.reason


@pytest.fixture
def harbor_row(example_rows, tmp_path):
    base = example_rows["slugify"]
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_hidden.py").write_text(
        textwrap.dedent("""
        from textkit import slugify

        def test_runs_collapse():
            assert slugify("Hello,  World!") == "hello-world"
    """)
    )
    (tests / "test.sh").write_text(
        textwrap.dedent("""\
        #!/bin/bash
        if python3 -m pytest -q -p no:cacheprovider /tests/test_hidden.py; then
          echo 1 > /logs/verifier/reward.txt
        else
          echo 0 > /logs/verifier/reward.txt
        fi
    """)
    )
    md = {
        "instance_id": "harbor-slug",
        "image": base.image,
        "workdir": base.workdir,
        "problem_statement": base.problem_statement,
        "harbor_tests_dir": "tests",
    }
    return parse_row({"metadata": md}, base_dir=tmp_path)


async def test_harbor_reward_file(harbor_row, example_rows):
    assert harbor_row.grader == "harbor"
    gold = await grade(harbor_row, example_rows["slugify"].patch)
    assert (gold.reward, gold.failure_kind) == (1.0, None), gold.reason
    noop = await grade(harbor_row, "", allow_empty=True)
    assert (noop.reward, noop.failure_kind) == (0.0, "model")


async def test_harbor_without_reward_file_is_infra(harbor_row, example_rows):
    (harbor_row.harbor_tests_dir / "test.sh").write_text("#!/bin/bash\necho forgot the reward\n")
    result = await grade(harbor_row, example_rows["slugify"].patch)
    assert result.failure_kind == "infra" and "no reward file" in result.reason


def test_result_metadata_is_json_ready():
    from coding_agent_rl.grading.result import GradeResult

    md = GradeResult(reward=1.0, protected_paths_touched=["conftest.py"]).to_metadata()
    assert json.loads(json.dumps(md))["protected_paths_touched"] == ["conftest.py"]
    assert "test_log" not in md
