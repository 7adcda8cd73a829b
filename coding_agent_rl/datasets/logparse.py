"""Test-log parsers: a log (and, for JUnit, the XML report) -> ``{test id: status}``.

Statuses: PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS. Only PASSED counts as a pass when the
reward is computed (see grade.py): a skip or an imperative ``pytest.xfail()`` from the code under
test must not earn reward.

The pytest parser reads only the ``short test summary info`` region(s) of ``pytest -rA``; when a
test id appears more than once the worst status wins, so a line forged after the real summary
cannot turn a failure into a pass. Ids are compared in a canonical form per parser
(:func:`canonical_id`): JUnit reports dotted ``classname.name``; R2E-Gym drops the file part.
The tests write the log and the report: every parser is total (a mangled input parses to fewer
results, never to an exception).
"""

from __future__ import annotations

import inspect
import re
import types
import xml.etree.ElementTree as ET

from coding_agent_rl.errors import GradingError

PARSERS = ("pytest", "junit", "swebench", "r2e", "swepro")
STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
_RANK = {"PASSED": 0, "XFAIL": 1, "SKIPPED": 2, "XPASS": 3, "FAILED": 4, "ERROR": 5}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SUMMARY = re.compile(r"^=+ short test summary info =+\s*$")
_RULE = re.compile(r"^=+ .* =+\s*$")
_VERBOSE = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: .*)?$")


class ParserUnavailable(GradingError):
    """The parser needs a package that is not installed (e.g. ``swebench``)."""


def merge(statuses: dict[str, str], test_id: str, status: str) -> None:
    """Record ``status`` for ``test_id``; a worse status already recorded is kept."""
    old = statuses.get(test_id)
    if old is None or _RANK.get(status, 5) > _RANK.get(old, 5):
        statuses[test_id] = status


def _split_id(rest: str) -> str:
    """The test id at the start of a summary line: up to ' - ' outside brackets."""
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif depth == 0 and rest.startswith(" - ", i):
            return rest[:i]
    return rest.rstrip()


def parse_pytest(log: str) -> dict[str, str]:
    """Parse the ``-rA`` short summary; falls back to ``-v`` lines when there is none."""
    statuses: dict[str, str] = {}
    in_summary = False
    found_summary = False
    for raw in _ANSI.sub("", log).splitlines():
        line = raw.rstrip("\r")
        if _SUMMARY.match(line):
            in_summary = found_summary = True
            continue
        if in_summary and _RULE.match(line):
            in_summary = False
            continue
        if not in_summary:
            continue
        status, _, rest = line.partition(" ")
        if status not in _RANK or not rest or rest.startswith("["):
            continue  # SKIPPED lines carry `[N] file:line: reason`, not a test id
        merge(statuses, _split_id(rest), status)
    if not found_summary:
        for raw in _ANSI.sub("", log).splitlines():
            m = _VERBOSE.match(raw.strip())
            if m:
                merge(statuses, m.group(1), m.group(2))
    return statuses


def parse_junit(xml_text: str) -> dict[str, str]:
    """Parse a JUnit XML report (pytest's, or any xUnit tool's) keyed by ``classname.name``."""
    statuses: dict[str, str] = {}
    try:
        root = ET.fromstring(xml_text)
    except (ET.ParseError, ValueError, RecursionError):  # the report is the tests' to mangle
        return statuses
    for case in root.iter("testcase"):
        name = case.get("name") or ""
        classname = case.get("classname") or ""
        test_id = f"{classname}.{name}" if classname else name
        status = "PASSED"
        for child in case:
            tag = child.tag
            if tag == "failure":
                status = "FAILED"
            elif tag == "error":
                status = "ERROR"
            elif tag == "skipped":
                status = "XFAIL" if child.get("type") == "pytest.xfail" else "SKIPPED"
        merge(statuses, canonical_id("junit", test_id), status)
    return statuses


def canonical_id(parser: str, test_id: str) -> str:
    """The form in which a dataset id and a parsed id are compared for ``parser``."""
    if parser == "junit":
        if "::" in test_id:  # pytest node id -> dotted junit id
            path, _, rest = test_id.partition("::")
            path = path[:-3] if path.endswith(".py") else path
            return ".".join([path.replace("/", "."), *rest.split("::")])
        return test_id
    if parser == "r2e" and "::" in test_id:
        return ".".join(test_id.split("::")[1:])
    return test_id


def parse_swebench(log: str, repo: str) -> dict[str, str]:
    """SWE-bench's own per-repository log parser (needs the ``swebench`` package), over the
    whole log and over each line alone, the worst status of a test kept: its parsers keep a
    test's last status, so a line the tests print after a failure cannot overwrite it."""
    try:
        from swebench.harness import log_parsers
    except ImportError as e:
        raise ParserUnavailable(f"log_parser 'swebench' needs the swebench package ({e})") from e
    by_repo = getattr(log_parsers, "MAP_REPO_TO_PARSER", None)
    if by_repo is None:  # swebench 5 names the parser per instance, not per repository
        raise ParserUnavailable(
            "log_parser 'swebench' needs swebench < 5 (its MAP_REPO_TO_PARSER); the installed "
            "one has none: pin swebench<5, or grade these rows with log_parser 'pytest'"
        )
    if repo not in by_repo:
        raise ParserUnavailable(f"log_parser 'swebench': swebench has no parser for {repo!r}")
    parser = by_repo[repo]
    spec = types.SimpleNamespace(repo=repo, version=None)
    two = len(inspect.signature(parser).parameters) >= 2  # newer: parser(log, test_spec)
    statuses: dict[str, str] = {}
    for i, part in enumerate((log, *log.split("\n"))):
        try:  # a third-party parser over text the tests wrote
            raw = parser(part, spec) if two else parser(part)
            found = [(str(t), str(getattr(s, "value", s)).upper()) for t, s in raw.items()]
        except Exception:
            if i == 0:
                return {}  # the whole log cannot be read: nothing parsed
            continue  # a line alone that a multi-line format cannot read
        for test_id, status in found:
            merge(statuses, test_id, status)
    return statuses


def parse_log(
    parser: str, log: str, *, junit_xml: str | None = None, repo: str | None = None
) -> dict[str, str]:
    """Dispatch on the dataset's ``log_parser`` name; ids come back canonical."""
    if parser == "pytest":
        return parse_pytest(log)
    if parser == "r2e":
        out: dict[str, str] = {}
        for k, v in parse_pytest(log).items():
            merge(out, canonical_id("r2e", k), v)
        return out
    if parser == "junit":
        return parse_junit(junit_xml) if junit_xml else {}
    if parser == "swebench":
        return parse_swebench(log, repo or "")
    raise ValueError(f"unknown log parser {parser!r}")
