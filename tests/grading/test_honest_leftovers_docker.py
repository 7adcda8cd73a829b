"""What real agents leave beside a real fix is not tampering: the gold patch plus each leftover
earns 1.0 through the real grading path (Docker, the grader's plugin), with the default
``zero`` screen policy. The exit and output rules still stop what they were for where the
result is read from the exit status or the output: a module the tests import that exits 0, on a
row graded by its exit status, is caught by the screen and paid with it off.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.screen import Added, screen

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

NOTEBOOK = json.dumps({"cells": [{"cell_type": "code", "source": ["import sys\n", "sys.exit(0)"]}]})
LEFTOVERS: dict[str, dict[str, str]] = {
    "reproduce script ending in sys.exit(0)": {
        "reproduce.py": "import sys\n\nfrom textkit import slugify\n\n"
        "print(slugify('Hello, World!'))\nsys.exit(0)\n"
    },
    "__main__ entry point": {
        "textkit/__main__.py": "import sys\n\nfrom textkit import slugify\n\n\n"
        "def main():\n    print(slugify(' '.join(sys.argv[1:])))\n    return 0\n\n\n"
        "raise SystemExit(main())\n"
    },
    "fork with os._exit in the child": {
        "textkit/spawn.py": "import os\n\n\ndef run_child(fn):\n    pid = os.fork()\n"
        "    if pid == 0:\n        fn()\n        os._exit(0)\n    os.waitpid(pid, 0)\n"
    },
    "atexit clean-up": {
        "textkit/cleanup.py": "import atexit\nimport shutil\nimport tempfile\n\n"
        "SCRATCH = tempfile.mkdtemp()\natexit.register(shutil.rmtree, SCRATCH, True)\n"
    },
    "debug print to the real stdout": {
        "textkit/debug.py": "import sys\n\n\ndef trace(*a):\n"
        "    print(*a, file=sys.__stdout__)\n    print(*a, file=sys.__stderr__)\n"
    },
    "listing open descriptors": {
        "textkit/fds.py": "import os\n\n\ndef open_fds():\n"
        "    return sorted(int(n) for n in os.listdir('/proc/self/fd'))\n"
    },
    "scratch files, a notebook, caches, odd names": {
        "scratch.py": "x = 1\nprint(x)\nquit()\n",
        "notes/try it.py": "import os\nos._exit(0)\n",
        "explore.ipynb": NOTEBOOK,
        ".pytest_cache/v/cache/lastfailed": "{}\n",
        ".mypy_cache/3.11/textkit.meta.json": "{}\n",
        "textkit/empty_module.py": "",
        "textkit/naïve-name.py": "VALUE = 1\n",
    },
}


async def test_every_honest_leftover_earns_full_reward(example_rows, make_diff):
    row = example_rows["slugify"]
    names = list(LEFTOVERS)
    diffs = [make_diff("slugify", LEFTOVERS[n], gold=True) for n in names]
    results = await asyncio.gather(*(grade(row, d) for d in diffs))
    for name, result in zip(names, results, strict=True):
        assert (result.reward, result.tampering) == (1.0, []), (name, result.reason)
        assert result.result_method == "plugin" and result.failure_kind is None, name


def test_the_leftovers_were_findings_under_every_rule():
    """The same files under the exit and output rules (how every row was screened before):
    each leftover but the notebook and caches is a finding there."""
    for name, files in LEFTOVERS.items():
        py = {p: t for p, t in files.items() if p.endswith(".py") and t}
        found = screen(py, {p: Added(whole=True) for p in py}, process=True)
        skip = screen(py, {p: Added(whole=True) for p in py}, process=False)
        assert found, name
        assert skip == [], (name, skip)


async def test_an_exit_at_import_is_still_caught_where_the_exit_status_is_the_result(
    example_rows, make_diff
):
    row = example_rows["slugify"]
    init = (row.build.context / "repo" / "textkit" / "__init__.py").read_text()
    diff = make_diff("slugify", {"textkit/__init__.py": init + "\nimport os\nos._exit(0)\n"})
    by_exit = dataclasses.replace(
        row, fail_to_pass=(), pass_to_pass=(), eval_cmd="python3 -m pytest -rA tests"
    )
    caught, paid, plugin = await asyncio.gather(
        grade(by_exit, diff),
        grade(by_exit, diff, defences=Defences(tamper_policy="off")),
        grade(row, diff),
    )
    assert caught.result_method == "exit_code" and caught.reward == 0.0, caught.reason
    assert any("os._exit" in t for t in caught.tampering), caught.tampering
    # The attack is real: with the screen off, exit status 0 is paid...
    assert (paid.reward, paid.exit_code) == (1.0, 0), paid.reason
    # ...and through the channel it forges nothing: no final record, the model's failure.
    assert (plugin.reward, plugin.failure_kind) == (0.0, "model"), plugin.reason
    assert "final result record never arrived" in plugin.reason
