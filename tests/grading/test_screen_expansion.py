"""The static tamper screen and the diff expansion bound, on text (no sandbox)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import textwrap

import pytest

from coding_agent_rl.datasets.schema import load_dataset
from coding_agent_rl.grading.expansion import expanded_size, expansion_problem
from coding_agent_rl.grading.screen import Added, screen_source, screened_files

EXAMPLES = pathlib.Path(__file__).parents[2] / "coding_agent_rl" / "datasets" / "examples"


def findings(source: str, path: str = "pkg/mod.py") -> list[str]:
    return [str(f) for f in screen_source(path, textwrap.dedent(source), Added(whole=True))]


@pytest.mark.parametrize(
    "code, what",
    [
        ("import _pytest.python\n", "imports test-framework internals (_pytest.python)"),
        ("from _pytest.config import Config\n", "imports test-framework internals"),
        ("import pluggy\n", "imports test-framework internals (pluggy)"),
        ("def f(config):\n    config.pluginmanager.register(1)\n", "(pluginmanager)"),
        ("import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef g(): pass\n", "(hookimpl)"),
        ("def pytest_runtest_makereport(item, call):\n    pass\n", "defines the pytest hook"),
        ("import os\ndef f():\n    os._exit(0)\n", "calls os._exit"),
        ("from os import _exit\n", "calls os._exit"),
        ("import sys\nsys.exit(0)\n", "calls sys.exit at module level"),
        ("raise SystemExit(0)\n", "raises SystemExit at module level"),
        ("import atexit\n", "imports atexit"),
        ("import gc\nx = gc.get_objects()\n", "gc.get_objects"),
        ("import sys\nsys.settrace(None)\n", "sys.settrace"),
        ("import threading\nthreading.setprofile(None)\n", "threading.setprofile"),
        ("import sys\nsys.__stdout__.write('x')\n", "sys.__stdout__"),
        ("import os\nos.listdir('/proc/self/fd')\n", "descriptor path"),
        ("import importlib\nimportlib.import_module('_pytest.runner')\n", "'_pytest.runner'"),
        ("import unittest\nunittest.TextTestRunner()\n", "unittest's runner"),
        ("from unittest.runner import TextTestRunner\n", "unittest's runner"),
    ],
)
def test_each_means_of_tampering_is_a_finding(code, what):
    got = findings(code)
    assert got and what in " | ".join(got), got
    assert got[0].startswith("pkg/mod.py:")


def test_ordinary_code_is_not_a_finding():
    assert (
        findings("""
        import os, sys, json, re, unittest, gc

        def main(argv):
            if not argv:
                sys.exit(2)  # inside a function: a CLI's exit, not the test process's
            gc.collect()
            return json.dumps({"cwd": os.getcwd()})

        class Case(unittest.TestCase):
            pass

        if __name__ == "__main__":
            import atexit
            atexit.register(print)
            sys.exit(main(sys.argv[1:]))
            os._exit(0)
    """)
        == []
    )


def test_a_framework_may_touch_its_own_internals():
    code = "from _pytest.config import Config\ndef pytest_configure(config):\n    pass\n"
    assert findings(code, "src/_pytest/terminal.py") == []
    assert findings(code, "src/myplugin/plugin.py") != []
    assert findings("import os\nos._exit(1)\n", "src/_pytest/main.py") != []


def test_only_lines_the_diff_adds_count():
    source = "import atexit\n\natexit.register(print)\n\nX = 1\n"
    patch = (
        "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
        "@@ -4,2 +4,2 @@\n \n-X = 0\n+X = 1\n"
    )
    added = screened_files(patch)
    assert list(added) == ["pkg/mod.py"] and added["pkg/mod.py"].numbers == {5}
    assert screen_source("pkg/mod.py", source, added["pkg/mod.py"]) == []
    worse = patch.replace("+X = 1\n", "+X = 1\n+import gc; gc.get_objects()\n")
    got = screen_source(
        "pkg/mod.py", source + "import gc; gc.get_objects()\n", screened_files(worse)["pkg/mod.py"]
    )
    assert [str(f) for f in got] == ["pkg/mod.py:6: walks live objects (gc.get_objects)"]


def test_test_files_are_not_screened():
    patch = (
        "diff --git a/tests/test_a.py b/tests/test_a.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_a.py\n@@ -0,0 +1 @@\n+import _pytest\n"
        "diff --git a/conftest.py b/conftest.py\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+x\n"
    )
    assert screened_files(patch) == {}


def test_gold_patches_of_the_bundled_tasks_are_clean(tmp_path):
    """The screen's false positives on known-good fixes: none (validate reports this count)."""
    for row in load_dataset(EXAMPLES / "tasks.jsonl"):
        repo = tmp_path / row.instance_id
        shutil.copytree(row.build.context / "repo", repo)
        subprocess.run(["git", "apply", "-"], input=row.patch, text=True, cwd=repo, check=True)
        changed = screened_files(row.patch)
        assert changed, row.instance_id  # every gold patch changes some library code
        for path, added in changed.items():
            assert screen_source(path, (repo / path).read_text(), added) == [], row.instance_id


def test_expansion_counts_binary_literals_and_refuses_copies():
    literal = (
        "diff --git a/big.bin b/big.bin\nnew file mode 100644\nindex 0000000..1111111\n"
        "GIT binary patch\nliteral 104857600\nzcmeIuF#!Lr0K~vSQ~&?~\n\nliteral 0\nHcmV?d00001\n\n"
    )
    assert expanded_size(literal) == 100 * 2**20
    assert expansion_problem(literal) == "diff expands to 100.0 MiB, over the 64 MiB cap"
    assert expansion_problem(literal, cap=200 * 2**20) is None
    copy = "diff --git a/a.py b/b.py\nsimilarity index 100%\ncopy from a.py\ncopy to b.py\n"
    assert "copies a file (a.py, b.py)" in expansion_problem(copy)
    text = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+bb\n"
    assert expanded_size(text) == len("+bb")
