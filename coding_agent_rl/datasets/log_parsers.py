"""Which log parser a row's test output needs, for errors that name the fix.

SWE-bench grades each repository with its own parser (``swebench.harness.log_parsers``); a row
whose test ids are not pytest node ids cannot be graded by ours. The table lists SWE-bench's
choice per repository (its published map), so the error names the parser even where the
``swebench`` package is not installed.
"""

from __future__ import annotations

# repository -> SWE-bench's parser for its test output (Python and Multimodal JS repositories).
SWEBENCH_PARSERS = {
    "astropy/astropy": "parse_log_astropy",
    "django/django": "parse_log_django",
    "marshmallow-code/marshmallow": "parse_log_marshmallow",
    "matplotlib/matplotlib": "parse_log_matplotlib",
    "mwaskom/seaborn": "parse_log_seaborn",
    "pallets/flask": "parse_log_flask",
    "psf/requests": "parse_log_requests",
    "pvlib/pvlib-python": "parse_log_pvlib",
    "pydata/xarray": "parse_log_xarray",
    "pydicom/pydicom": "parse_log_pydicom",
    "pylint-dev/astroid": "parse_log_astroid",
    "pylint-dev/pylint": "parse_log_pylint",
    "pytest-dev/pytest": "parse_log_pytest",
    "pyvista/pyvista": "parse_log_pyvista",
    "scikit-learn/scikit-learn": "parse_log_scikit",
    "sqlfluff/sqlfluff": "parse_log_sqlfluff",
    "sphinx-doc/sphinx": "parse_log_sphinx",
    "sympy/sympy": "parse_log_sympy",
    "Automattic/wp-calypso": "parse_log_calypso",
    "chartjs/Chart.js": "parse_log_chart_js",
    "markedjs/marked": "parse_log_marked",
    "processing/p5.js": "parse_log_p5js",
    "diegomura/react-pdf": "parse_log_react_pdf",
}
PYTEST_FAMILY = ("parse_log_pytest", "parse_log_pytest_v2", "parse_log_pytest_options")


def swebench_parser(repo: str | None) -> str | None:
    """SWE-bench's parser name for ``repo`` (the installed package's map first)."""
    if not repo:
        return None
    try:
        from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

        fn = MAP_REPO_TO_PARSER.get(repo)
        if fn is not None:
            return getattr(fn, "__name__", None) or SWEBENCH_PARSERS.get(repo)
    except ImportError:
        pass
    return SWEBENCH_PARSERS.get(repo)


def needed_parser_hint(repo: str | None, declared: str | None = None) -> str:
    """The sentence that tells a user which parser the row needs and how to get it."""
    name = declared or swebench_parser(repo)
    if name:
        return (
            f"grading {repo or 'it'} needs SWE-bench's log parser {name}: pip install swebench "
            "and set metadata.log_parser to 'swebench' (convert does, once it is installed)"
        )
    return (
        "set metadata.log_parser to the parser its test output needs "
        "(pytest, junit, swebench, r2e, swepro)"
    )
