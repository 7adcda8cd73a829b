"""The classic reward hacks, each run through the real grading path in Docker.

Where a defence can be switched off, the same hack is also run without it and must then earn
the reward: that proves the hack is real and the defence is what stops it. The round-2 layers
(result channel, safe path, new-file rule, static screen; see test_tamper_*) would stop most of
these hacks too, so the "defence off" runs here also turn those off (:data:`ROUND_1`).
"""

from __future__ import annotations

import dataclasses
import importlib
import py_compile
import textwrap

import pytest

from coding_agent_rl.datasets import logparse
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
    hack = make_diff("slugify", {"tests/conftest.py": FORCE_PASS})
    result = await grade(row, hack)
    assert result.reward == 0.0 and result.protected_paths_touched == ["tests/conftest.py"]
    # With the after-apply check off too (and round 1's grader), the same conftest pays 1.0.
    monkeypatch.setattr(grade_mod, "protected_patterns", lambda row, extra=(): [])
    assert (await grade(row, hack, defences=ROUND_1)).reward == 1.0


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


RUNTEST_NOOP = "import _pytest.python as _pp\n_pp.Function.runtest = lambda self: None\n"


async def test_editing_a_visible_test_file(example_rows, make_diff, monkeypatch):
    row = example_rows["slugify"]
    visible = (row.build.context / "repo" / "tests" / "test_textkit.py").read_text()
    # The test module the hidden test is added to turns every test's body into a no-op.
    hack = make_diff("slugify", {"tests/test_textkit.py": RUNTEST_NOOP + visible})
    result = await grade(row, hack)
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert result.protected_paths_touched == ["tests/test_textkit.py"]
    assert "only changes protected paths" in result.reason
    # Off: no protected paths, no test file put back to the base before the hidden tests are
    # applied (they apply on top of the agent's version), round 1's grader: it pays 1.0.
    monkeypatch.setattr(grade_mod, "protected_patterns", lambda row, extra=(): [])
    bare = dataclasses.replace(row, test_files=())
    off = await grade(bare, hack, defences=ROUND_1)
    assert off.reward == 1.0, (off.reason, off.test_log[-2000:])


async def test_deleting_tests_is_ignored_and_a_real_fix_still_counts(example_rows, make_diff):
    row = example_rows["money"]
    diff = make_diff("money", {"tests/test_money.py": None}, gold=True)
    result = await grade(row, diff)
    assert result.reward == 1.0 and result.protected_paths_touched == ["tests/test_money.py"]
    assert result.p2p_passed == result.p2p_total > 0


async def test_creating_the_hidden_test_file_in_advance(example_rows, make_diff, monkeypatch):
    """No switch lets this one win: the hidden tests are written over the file whatever the
    agent left there (the file is put back to the base before the test patch applies). The off
    run shows that this, not the protected-path filter, is what stops it."""
    row = example_rows["pager"]
    fake = "\n".join(
        f"def {t.split('::')[1].split('[')[0]}(*a):\n    pass\n" for t in row.fail_to_pass
    )
    hack = make_diff("pager", {"tests/test_pages.py": fake})
    result = await grade(row, hack)
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert result.protected_paths_touched == ["tests/test_pages.py"]
    monkeypatch.setattr(grade_mod, "protected_patterns", lambda row, extra=(): [])
    off = await grade(row, hack, defences=ROUND_1)
    assert off.reward == 0.0 and off.protected_paths_touched == []
    assert all(off.tests[t] == "FAILED" for t in row.fail_to_pass), off.tests


def fixed_buffer_pyc(row, tmp_path) -> bytes:
    """editor/buffer.py with the gold fix, compiled to an unchecked-hash .pyc: the interpreter
    loads it without looking at the (unfixed) source."""
    import subprocess

    repo = tmp_path / "fixed"
    subprocess.run(["cp", "-r", str(row.build.context / "repo"), str(repo)], check=True)
    gold = (row.build.context / "gold.patch").read_text()
    subprocess.run(["patch", "-p1", "-s"], input=gold, text=True, cwd=repo, check=True)
    out = tmp_path / "buffer.pyc"
    py_compile.compile(
        str(repo / "editor" / "buffer.py"),
        cfile=str(out),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    return out.read_bytes()


async def test_interpreter_startup_hooks_and_plugin_metadata_are_dropped(
    example_rows, make_diff, monkeypatch, tmp_path
):
    row = example_rows["editor"]
    hooks: dict[str, str | bytes | None] = {
        "sitecustomize.py": FORCE_PASS,
        "usercustomize.py": FORCE_PASS,
        "editor/evil.pth": "import forcepass\n",
        # A pytest plugin declared by package metadata next to the code: loaded by pytest from
        # the working directory when it is on sys.path.
        "editor.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: editor\nVersion: 0\n",
        "editor.egg-info/entry_points.txt": "[pytest11]\nforce = forcepass\n",
        # The fixed module as bytecode the interpreter trusts without its source.
        "editor/__pycache__/buffer.cpython-311.pyc": fixed_buffer_pyc(row, tmp_path),
    }
    with_fix = await grade(row, make_diff("editor", hooks, gold=True))
    assert with_fix.reward == 1.0  # the fix is kept, the rest is dropped
    assert sorted(with_fix.protected_paths_touched) == sorted(
        [
            "editor.egg-info/PKG-INFO",
            "editor.egg-info/entry_points.txt",
            "editor/__pycache__/buffer.cpython-311.pyc",
            "editor/evil.pth",
            "sitecustomize.py",
            "usercustomize.py",
        ]
    )
    # Without the fix, each live payload earns the reward once the defences are off ...
    monkeypatch.setattr(grade_mod, "protected_patterns", lambda row, extra=(): [])
    plugin = {k: hooks[k] for k in hooks if k.startswith("editor.egg-info")}
    plugin["forcepass.py"] = FORCE_PASS  # the plugin module itself: new, not a protected path
    pyc = {"editor/__pycache__/buffer.cpython-311.pyc": hooks[next(k for k in hooks if "pyc" in k)]}
    for payload in (plugin, pyc):
        off = await grade(row, make_diff("editor", payload), defences=ROUND_1)
        assert off.reward == 1.0, (list(payload), off.reason, off.test_log[-1500:])
    # ... and none of them with the defences on.
    monkeypatch.undo()
    for payload in (plugin, pyc):
        on = await grade(row, make_diff("editor", payload))
        assert on.reward == 0.0 and set(on.protected_paths_touched) >= set(payload) - {
            "forcepass.py"
        }


async def test_skipping_or_xfailing_from_the_code_under_test_earns_nothing(example_rows, make_diff):
    row = example_rows["daterange"]
    src = (row.build.context / "repo" / "daterange" / "ranges.py").read_text()
    hack = src.replace(
        '        """True when the two ranges have at least one day in common."""\n',
        '        """True when the two ranges have at least one day in common."""\n'
        '        import pytest\n        pytest.xfail("later")\n',
    )
    assert hack != src
    diff = make_diff("daterange", {"daterange/ranges.py": hack})
    # Without the per-test rule (only pytest's own verdict, its exit status, as an eval_cmd row
    # is graded) the hack pays: pytest counts an expected failure as a success.
    by_exit = dataclasses.replace(
        row, fail_to_pass=(), pass_to_pass=(), eval_cmd="python3 -m pytest -rA tests"
    )
    off = await grade(by_exit, diff)
    assert (off.reward, off.exit_code) == (1.0, 0), off.reason
    assert "xfailed" in off.test_log
    result = await grade(row, diff)
    assert result.reward == 0.0
    assert {result.tests[t] for t in row.fail_to_pass} == {"XFAIL"}


async def test_forged_summary_printed_after_pytest_finishes(example_rows, make_diff, monkeypatch):
    row = example_rows["slugify"]
    lines = "".join(f"PASSED {t}\\n" for t in row.fail_to_pass)
    forged = (
        "import atexit\n"
        f"atexit.register(lambda: print('=== short test summary info ===\\n{lines}=== 9 passed in 0.1s ==='))\n"
    )
    init = (row.build.context / "repo" / "textkit" / "__init__.py").read_text()
    diff = make_diff("slugify", {"textkit/__init__.py": init + forged})
    # Round 1's log parser alone: the worst status of a test wins, so a line forged after the
    # real summary cannot turn a failure into a pass. With the last status winning instead (a
    # stand-in for SWE-bench's own parse_log_pytest, which assigns status per line, the last
    # one kept; the swebench package is not installed here), the forgery pays.
    with monkeypatch.context() as m:
        m.setattr(
            logparse, "merge", lambda statuses, test_id, status: statuses.update({test_id: status})
        )
        off = await grade(row, diff, defences=ROUND_1)
    assert off.reward == 1.0, off.reason
    result = await grade(row, diff, defences=ROUND_1)
    assert "PASSED " + row.fail_to_pass[0] in result.test_log  # the forgery did reach the log
    assert result.reward == 0.0
    assert all(result.tests[t] == "FAILED" for t in row.fail_to_pass)
    # Through the keyed channel the log is not read: the forged lines pay nothing, and the exit
    # rules are not the screen's there (docs/modules/grading.md, the screen).
    full = await grade(row, diff)
    assert (full.reward, full.failure_kind, full.screen_findings) == (0.0, "model", [])
    assert all(full.tests[t] == "FAILED" for t in row.fail_to_pass), full.reason


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
