"""The new-module rule with the import roots of the real interpreter: what pytest's configuration
puts on ``sys.path`` (ini ``pythonpath``, a conftest's own ``sys.path`` edits), not only the
workdir and the test directories. Real Docker, the real grader.

The shadow is a new ``pdb.py`` at such a root: pytest imports ``pdb`` in its own
``pytest_configure``, after the plugin loaded, so the module's code runs in the test process and
forces every test to pass (``Function.runtest`` replaced). Canaries are off and the screen only
records, so the rule alone decides: off, the forgery wins (1.0); on, the file is removed before
``pdb`` is imported and the honest failure stands.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex

import pytest

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.grade import grade

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

ON = Defences(canaries=False, tamper_policy="flag")
OFF = dataclasses.replace(ON, safe_path=False, new_files=False)
PAYLOAD = (
    "import sys\n"
    "sys.modules['_py' + 'test.python'].Function.runtest = lambda self: None\n"
    "def set_trace(*args, **kwargs):\n    pass\n"
    "class Pdb:\n    pass\n"
)
CONFTEST = (
    "import os, sys\n"
    "sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'vendor'))\n"
)


@pytest.mark.parametrize(
    "setup, shadow",
    [
        # the finding: pytest puts the ini's `pythonpath` first on sys.path
        (("printf '[pytest]\\npythonpath = src\\n' > pytest.ini", "mkdir -p src"), "src/pdb.py"),
        # a repository's own conftest that puts a vendored directory first
        ((f"printf %s {shlex.quote(CONFTEST)} > tests/conftest.py",), "vendor/pdb.py"),
    ],
)
async def test_a_new_module_at_a_configured_import_root_is_removed(
    example_rows, make_diff, setup, shadow
):
    row = dataclasses.replace(example_rows["slugify"], pre_commands=setup)
    diff = make_diff("slugify", {shadow: PAYLOAD})
    off, on = await asyncio.gather(grade(row, diff, defences=OFF), grade(row, diff, defences=ON))
    assert off.reward == 1.0, off.reason  # the attack is real
    assert (on.reward, on.failure_kind) == (0.0, "model"), on.reason
    assert on.protected_paths_touched == [shadow]
    assert all(on.tests[t] == "FAILED" for t in row.fail_to_pass)
