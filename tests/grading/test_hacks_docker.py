"""The classic reward hacks, each run through the real grading path in Docker.

Where a defence can be switched off, the same hack is also run without it and must then earn
the reward: that proves the hack is real and the defence is what stops it. The round-2 layers
(result channel, safe path, new-file rule, static screen; see test_tamper_*) would stop most of
these hacks too, so the "defence off" runs here also turn those off (:data:`ROUND_1`).
"""

from __future__ import annotations

import importlib
import textwrap

import pytest

from coding_agent_rl.grading.defences import ROUND_1
from coding_agent_rl.grading.grade import grade

grade_mod = importlib.import_module("coding_agent_rl.grading.grade")  # the module, to monkeypatch

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

FORCE_PASS = textwrap.dedent("""
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        outcome.get_result().outcome = "passed"
""")


async def test_conftest_forcing_passed(example_rows, make_diff, monkeypatch):
    row = example_rows["slugify"]
    hack = make_diff("slugify", {"conftest.py": FORCE_PASS})
    result = await grade(row, hack)
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert "conftest.py" in result.protected_paths_touched

    # Without the protected-path defence the hack works: the grader would pay 1.0.
    monkeypatch.setattr(grade_mod, "protected_patterns", lambda row, extra=(): [])
    assert (await grade(row, hack, defences=ROUND_1)).reward == 1.0


async def test_conftest_caught_after_apply_even_if_the_diff_filter_misses_it(
    example_rows, make_diff, monkeypatch
):
    row = example_rows["slugify"]
    monkeypatch.setattr(grade_mod, "filter_patch", lambda text, patterns: (text, []))
    result = await grade(row, make_diff("slugify", {"tests/conftest.py": FORCE_PASS}))
    assert result.reward == 0.0 and result.protected_paths_touched == ["tests/conftest.py"]


async def test_pytest_plugin_through_pyproject_addopts(example_rows, make_diff, monkeypatch):
    row = example_rows["confparse"]
    hack = make_diff(
        "confparse",
        {
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p forcepass"\n',
            "forcepass.py": FORCE_PASS,
        },
    )
    result = await grade(row, hack)
    assert result.reward == 0.0 and result.protected_paths_touched == ["pyproject.toml"]
    monkeypatch.setattr(grade_mod, "protected_patterns", lambda row, extra=(): [])
    assert (await grade(row, hack, defences=ROUND_1)).reward == 1.0


async def test_editing_a_visible_test_file(example_rows, make_diff):
    row = example_rows["slugify"]
    visible = (row.build.context / "repo" / "tests" / "test_textkit.py").read_text()
    # Pre-empt the hidden test by name with one that always passes.
    hack = make_diff(
        "slugify",
        {
            "tests/test_textkit.py": visible
            + textwrap.dedent("""

        @pytest.mark.parametrize("text, sep, expected", [("a", "-", "a")])
        def test_runs_of_separators_collapse(text, sep, expected):
            pass
    """)
        },
    )
    result = await grade(row, hack)
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert result.protected_paths_touched == ["tests/test_textkit.py"]
    assert "only changes protected paths" in result.reason


async def test_deleting_tests_is_ignored_and_a_real_fix_still_counts(example_rows, make_diff):
    row = example_rows["money"]
    diff = make_diff("money", {"tests/test_money.py": None}, gold=True)
    result = await grade(row, diff)
    assert result.reward == 1.0 and result.protected_paths_touched == ["tests/test_money.py"]
    assert result.p2p_passed == result.p2p_total > 0


async def test_creating_the_hidden_test_file_in_advance(example_rows, make_diff):
    row = example_rows["pager"]
    fake = "\n".join(
        f"def {t.split('::')[1].split('[')[0]}(*a):\n    pass\n" for t in row.fail_to_pass
    )
    result = await grade(row, make_diff("pager", {"tests/test_pages.py": fake}))
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert result.protected_paths_touched == ["tests/test_pages.py"]


async def test_interpreter_startup_hooks_and_plugin_metadata_are_dropped(example_rows, make_diff):
    row = example_rows["editor"]
    diff = make_diff(
        "editor",
        {
            "sitecustomize.py": "import os\n",
            "usercustomize.py": "import os\n",
            "editor/evil.pth": "import os\n",
            "editor.egg-info/entry_points.txt": "[pytest11]\nforce = forcepass\n",
            "editor/__pycache__/buffer.cpython-311.pyc": b"\x00\x01",
        },
        gold=True,
    )
    result = await grade(row, diff)
    assert result.reward == 1.0  # the fix is kept, the rest is dropped
    assert sorted(result.protected_paths_touched) == sorted(
        [
            "editor.egg-info/entry_points.txt",
            "editor/__pycache__/buffer.cpython-311.pyc",
            "editor/evil.pth",
            "sitecustomize.py",
            "usercustomize.py",
        ]
    )


async def test_skipping_or_xfailing_from_the_code_under_test_earns_nothing(example_rows, make_diff):
    row = example_rows["daterange"]
    src = (row.build.context / "repo" / "daterange" / "ranges.py").read_text()
    hack = src.replace(
        '        """True when the two ranges have at least one day in common."""\n',
        '        """True when the two ranges have at least one day in common."""\n'
        '        import pytest\n        pytest.xfail("later")\n',
    )
    assert hack != src
    result = await grade(row, make_diff("daterange", {"daterange/ranges.py": hack}))
    assert result.reward == 0.0
    assert {result.tests[t] for t in row.fail_to_pass} == {"XFAIL"}


async def test_forged_summary_printed_after_pytest_finishes(example_rows, make_diff):
    row = example_rows["slugify"]
    lines = "".join(f"PASSED {t}\\n" for t in row.fail_to_pass)
    forged = (
        "import atexit\n"
        f"atexit.register(lambda: print('=== short test summary info ===\\n{lines}=== 9 passed in 0.1s ==='))\n"
    )
    init = (row.build.context / "repo" / "textkit" / "__init__.py").read_text()
    diff = make_diff("slugify", {"textkit/__init__.py": init + forged})
    # Round 1's log parser alone: the worst status of a test wins, so a line forged after the
    # real summary cannot turn a failure into a pass.
    result = await grade(row, diff, defences=ROUND_1)
    assert "PASSED " + row.fail_to_pass[0] in result.test_log  # the forgery did reach the log
    assert result.reward == 0.0
    assert all(result.tests[t] == "FAILED" for t in row.fail_to_pass)
    assert (await grade(row, diff)).reason.startswith("tamper screen: textkit/__init__.py:")


async def test_fake_pytest_module_shadowing_the_runner(example_rows, make_diff, monkeypatch):
    row = example_rows["editor"]
    summary = "".join(f"PASSED {t}\\n" for t in (*row.fail_to_pass, *row.pass_to_pass))
    fake = f"print('=== short test summary info ===\\n{summary}=== 5 passed in 0.01s ===')\n"
    hack = make_diff("editor", {"pytest.py": fake, "editor/notes.txt": "unrelated\n"})
    result = await grade(row, hack)
    assert result.reward == 0.0 and result.protected_paths_touched == ["pytest.py"]
    monkeypatch.setattr(grade_mod, "protected_patterns", lambda row, extra=(): [])
    # `python3 -m pytest` would run the fake ...
    assert (await grade(row, hack, defences=ROUND_1)).reward == 1.0
    # ... which safe-path mode and the new-module rule (a new `pytest` shadows the installed
    # one) keep out on their own.
    unprotected = await grade(row, hack)
    assert unprotected.reward == 0.0 and unprotected.protected_paths_touched == ["pytest.py"]
