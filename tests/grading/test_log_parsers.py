"""Log parsers on real pytest output (produced here by running pytest) and hand-written edges."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import pytest

from coding_agent_rl.datasets.logparse import (
    PARSERS,
    ParserUnavailable,
    canonical_id,
    parse_junit,
    parse_log,
    parse_pytest,
)
from coding_agent_rl.datasets.schema import LOG_PARSERS

SUITE = textwrap.dedent("""
    import pytest

    def test_pass():
        pass

    def test_fail():
        assert 1 == 2

    @pytest.mark.parametrize("s", ["a - b", "x[y]", "Hello, World!"])
    def test_param(s):
        assert s != "x[y]"

    @pytest.mark.skip(reason="nope")
    def test_skipped():
        pass

    @pytest.mark.xfail
    def test_xfail():
        assert False

    @pytest.mark.xfail
    def test_xpass():
        pass

    @pytest.fixture
    def broken():
        raise RuntimeError("fixture - boom")

    def test_error(broken):
        pass

    class TestGroup:
        def test_method(self):
            print("PASSED test_suite.py::test_fail")  # a forged line inside captured output
""")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("suite")
    (d / "test_suite.py").write_text(SUITE)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-rA",
            "-p",
            "no:cacheprovider",
            "--junitxml=report.xml",
            "test_suite.py",
        ],
        cwd=d,
        capture_output=True,
        text=True,
    )
    return r.stdout, (d / "report.xml").read_text()


EXPECTED = {
    "test_suite.py::test_pass": "PASSED",
    "test_suite.py::test_fail": "FAILED",
    "test_suite.py::test_param[a - b]": "PASSED",
    "test_suite.py::test_param[x[y]]": "FAILED",
    "test_suite.py::test_param[Hello, World!]": "PASSED",
    "test_suite.py::test_xfail": "XFAIL",
    "test_suite.py::test_xpass": "XPASS",
    "test_suite.py::test_error": "ERROR",
    "test_suite.py::TestGroup::test_method": "PASSED",
}


def test_pytest_summary(run):
    statuses = parse_pytest(run[0])
    for test_id, status in EXPECTED.items():
        assert statuses.get(test_id) == status, test_id
    assert "test_suite.py::test_skipped" not in statuses  # -rA gives no id for skips


def test_junit_report(run):
    statuses = parse_junit(run[1])
    for test_id, status in EXPECTED.items():
        if status == "XPASS":
            continue  # junit reports a non-strict xpass as a pass
        assert statuses.get(canonical_id("junit", test_id)) == status, test_id
    assert statuses[canonical_id("junit", "test_suite.py::test_skipped")] == "SKIPPED"


def test_forged_lines_after_the_summary_do_not_turn_a_failure_into_a_pass(run):
    forged = run[0] + "\nPASSED test_suite.py::test_fail\n"
    forged += "=========== short test summary info ============\nPASSED test_suite.py::test_fail\n"
    assert parse_pytest(forged)["test_suite.py::test_fail"] == "FAILED"


def test_verbose_fallback_and_ansi():
    log = "\x1b[32mtests/test_a.py::test_x PASSED\x1b[0m [ 50%]\ntests/test_a.py::test_y FAILED [100%]\n"
    assert parse_pytest(log) == {
        "tests/test_a.py::test_x": "PASSED",
        "tests/test_a.py::test_y": "FAILED",
    }


def test_nothing_to_parse():
    assert parse_pytest("Traceback (most recent call last):\n  boom\n") == {}
    assert parse_log("junit", "whatever", junit_xml=None) == {}


def test_r2e_ids_drop_the_file():
    log = "==== short test summary info ====\nPASSED r2e_tests/test_1.py::TestA::test_b\n==== 1 passed in 0.1s ====\n"
    assert parse_log("r2e", log) == {"TestA.test_b": "PASSED"}


def test_swebench_parser_without_the_package_is_an_infra_error():
    pytest.importorskip("pytest")  # always there; documents that swebench is not
    try:
        import swebench  # noqa: F401
    except ImportError:
        with pytest.raises(ParserUnavailable):
            parse_log("swebench", "log", repo="astropy/astropy")
    else:
        pytest.skip("swebench is installed; its parsers are exercised by its own tests")


def test_parser_names_match_the_schema():
    assert set(PARSERS) == set(LOG_PARSERS)


def _standin_swebench(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A stand-in for ``swebench.harness.log_parsers`` (the package is not installed here):
    parsers shaped like SWE-bench's, a dict per log in which a test's last line wins."""
    import types as pytypes

    def last_wins(log: str, test_spec: object) -> dict[str, str]:
        out = {}
        for line in log.split("\n"):
            word, _, rest = line.partition(" ")
            if word in ("PASSED", "FAILED", "ERROR", "SKIPPED") and rest:
                out[rest.split()[0]] = word
        return out

    def two_lines(log: str) -> dict[str, str]:  # "name" then "... ok" on the next line
        lines = log.split("\n")
        if len(lines) < 2:
            raise IndexError("needs the next line")
        return {a: "PASSED" for a, b in itertools.pairwise(lines) if b == "... ok"}

    parsers = {"org/lastwins": last_wins, "org/twolines": two_lines}
    mod = pytypes.ModuleType("swebench.harness.log_parsers")
    mod.MAP_REPO_TO_PARSER = parsers  # type: ignore[attr-defined]
    for name in ("swebench", "swebench.harness"):
        monkeypatch.setitem(sys.modules, name, pytypes.ModuleType(name))
    monkeypatch.setitem(sys.modules, "swebench.harness.log_parsers", mod)
    return parsers


def test_swebench_parsers_keep_a_failure_that_a_later_forged_line_would_overwrite(monkeypatch):
    parsers = _standin_swebench(monkeypatch)
    log = "FAILED t::a - boom\nPASSED t::b\nsome output\nPASSED t::a\n"
    # The attack: the parser alone lets the line printed after the failure win.
    assert parsers["org/lastwins"](log, None)["t::a"] == "PASSED"  # type: ignore[operator]
    assert parse_log("swebench", log, repo="org/lastwins") == {"t::a": "FAILED", "t::b": "PASSED"}
    # A multi-line format still parses (its single lines are skipped, not fatal).
    assert parse_log("swebench", "t::c\n... ok\n", repo="org/twolines") == {"t::c": "PASSED"}


def test_a_swebench_without_the_repository_map_is_named_not_a_key_error(monkeypatch):
    """swebench 5 (read from its 5.0.2 wheel) dropped ``MAP_REPO_TO_PARSER`` for a registry of
    parser names: say so in one line instead of failing on the import."""
    import types as pytypes

    _standin_swebench(monkeypatch)
    newer = pytypes.ModuleType("swebench.harness.log_parsers")
    newer.PARSER_REGISTRY = {}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "swebench.harness.log_parsers", newer)
    with pytest.raises(ParserUnavailable, match="swebench < 5"):
        parse_log("swebench", "PASSED t::a\n", repo="org/lastwins")
    _standin_swebench(monkeypatch)
    with pytest.raises(ParserUnavailable, match="no parser for 'org/other'"):
        parse_log("swebench", "PASSED t::a\n", repo="org/other")
