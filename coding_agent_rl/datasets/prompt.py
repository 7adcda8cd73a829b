"""The task prompt handed to the agent CLI."""

from __future__ import annotations

import string

PROBLEM_FILE = "PROBLEM_STATEMENT.md"

DEFAULT_TEMPLATE = """\
You are working in the git repository at $workdir.

Resolve the problem described below (the same text is in $workdir/$problem_file).
Make the smallest correct change to the source code. Do not modify or add tests, and do not
commit: your uncommitted working-tree changes are what will be evaluated.

<problem_statement>
$problem_statement
</problem_statement>
"""


def render_prompt(problem_statement: str, workdir: str, template: str | None = None) -> str:
    """``template`` (the ``prompt_template`` setting; None: :data:`DEFAULT_TEMPLATE`) uses
    ``$workdir``, ``$problem_statement`` and ``$problem_file``; ``{problem_statement}`` style
    works too."""
    template = template or DEFAULT_TEMPLATE
    values = {
        "workdir": workdir,
        "problem_statement": problem_statement,
        "problem_file": PROBLEM_FILE,
    }
    if "$" not in template and "{" in template:
        return template.format(**values)
    return string.Template(template).safe_substitute(values)
