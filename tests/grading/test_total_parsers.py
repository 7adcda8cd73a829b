"""Every parser of agent-controlled bytes returns a result (or a model-side finding), never an
exception: the findings that used to turn a model failure into infra, each on the parser it hit,
then new instances of the same classes (the whole grader in Docker: test_total_grading_docker)."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess

import pytest

from coding_agent_rl.datasets.logparse import parse_junit, parse_log
from coding_agent_rl.grading.channel import read_records
from coding_agent_rl.grading.expansion import expansion_problem
from coding_agent_rl.grading.screen import Added, ast_lines, screen, screen_source, screened_files
from coding_agent_rl.patches.files import filter_patch, patch_paths, split_patch

SEP = "\u2028"


def signed(key: bytes, records: list[dict]) -> bytes:
    """Channel lines as the plugin signs them (the attacker in the test process has the key)."""
    mac, out = b"", []
    for n, rec in enumerate(records):
        body = json.dumps(dict(rec, n=n), sort_keys=True, separators=(",", ":"))
        mac = hmac.new(key, mac + body.encode(), hashlib.sha256).hexdigest().encode()
        out.append(body[:-1] + ',"m":"' + mac.decode() + '"}')
    return ("\n".join(out) + "\n").encode()


def git_diff(tmp_path, files: dict[str, str]) -> str:
    """A diff as our capture writes it (``core.quotePath=false``)."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(
            [
                "git",
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "core.quotePath=false",
                *args,
            ],
            cwd=repo,
            check=True,
            capture_output=True,
        ).stdout.decode("utf-8", "surrogateescape")

    git("init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git("add", "-A")
    return git("diff", "--cached", "--binary")


# ---- the findings -----------------------------------------------------------------------------


def test_a_2000_term_expression_is_screened_not_a_recursion_error():
    source = "import _pytest.python\nx = " + "+".join(["1"] * 2000) + "\n"
    got = [str(f) for f in screen_source("pkg/m.py", source, Added(whole=True))]
    assert got == ["pkg/m.py:1: imports test-framework internals (_pytest.python)"]
    nested = "y = " + "(" * 150 + "1" + ")" * 150 + "\nimport pluggy\n"
    assert len(screen_source("pkg/m.py", nested, Added(whole=True))) == 1


def test_a_file_named_with_a_quote_and_u2028_splits_as_one_section(tmp_path):
    name = f'q"{SEP}x.py'
    diff = git_diff(tmp_path, {name: "import _pytest\n", "b.py": "y = 2\n"})
    assert f'"b/q\\"{SEP}x.py"' in diff  # git quotes the quote, keeps U+2028 raw
    sections = split_patch(diff)
    assert [fp.new_path for fp in sections] == ["b.py", name]
    assert name in screened_files(diff)


def test_a_validly_signed_record_of_the_wrong_type_is_evidence():
    key = b"k" * 64
    for bad in (
        {"k": "test", "id": "t::a", "s": "PASSED", "rw": 7},
        {"k": "collected", "ids": 5},
        {"k": "start", "removed": [1, 2]},
        {"k": "final", "exitstatus": "0", "records": 1},
        {"k": "test", "id": ["t"], "s": "PASSED"},
    ):
        records = read_records(signed(key, [{"k": "start", "removed": []}, bad]), key)
        assert records.forged and "malformed" in records.forged[0], bad
    odd = [
        b'{"n":"zero","m":"' + b"0" * 64 + b'"}',
        signed(key, [{"k": "test", "id": "a", "s": "PASSED"}]).replace(b'"n":0', b'"n":"0"'),
    ]
    for data in odd:
        assert read_records(data, key).forged
    not_object = hmac.new(key, b"[1,2]", hashlib.sha256).hexdigest()
    assert read_records(b'[1,2,"m":"' + not_object.encode() + b'"}\n', key).forged


def test_conftests_under_a_u2028_directory_are_protected(tmp_path):
    files = {f"d{SEP}{i}/conftest.py": "import pytest\n" for i in range(3)}
    diff = git_diff(tmp_path, files)
    kept, dropped = filter_patch(diff, ["conftest.py"])
    assert kept == "" and sorted(dropped) == sorted(files)
    assert sorted(patch_paths(diff)) == sorted(files)


def test_u2028_comment_does_not_shift_screen_line_numbers():
    """The screen numbers lines as the parser does: a changed line right after a comment full
    of U+2028 is still the changed line."""
    source = "X = 1\n# " + SEP * 50 + "\nimport atexit\n"
    patch = (
        "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n"
        f"@@ -1,2 +1,3 @@\n X = 1\n # {SEP * 50}\n+import atexit\n"
    )
    added = screened_files(patch)["pkg/m.py"]
    assert added.numbers == {3} and len(ast_lines(source)) == 4
    assert [str(f) for f in screen_source("pkg/m.py", source, added)] == [
        "pkg/m.py:3: imports atexit"
    ]


def test_framework_rules_cover_the_whole_changed_file():
    """``import _pytest.python`` on an unchanged line, or reached through a lone ``\\r`` that
    moves it off the diff's numbering, is still a finding once the file changes at all."""
    source = "import _pytest.python\nX = 2\n"
    added = Added(numbers={2}, texts={"X = 2"})
    assert [f.what for f in screen_source("m.py", source, added)] == [
        "imports test-framework internals (_pytest.python)"
    ]
    cr = "X = 1\rimport atexit\nY = 2\n"  # one diff line, two parser lines
    assert [f.line for f in screen_source("m.py", cr, Added(numbers={1}))] == [2]


# ---- new instances ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "patch",
    [
        'diff --git "a/unterminated b/x\n--- "a/x\n+++ "b/x\n@@ -1 +1 @@\n-a\n+b\n',
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1,99999999999999999999999 @@\n+a\n",
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +" + "9" * 5000 + " @@\n+a\n",
        "diff --git a/x b/x\nGIT binary patch\nliteral ²\nzcmV\n\n",
        "diff --git a/x b/x\nGIT binary patch\ndelta 5\n\x00\n\n",
        "diff --git " + "a/" * 5000 + " b/\n",
        "rename from \nrename to \n",
        '--- "\\\n+++ "\\\udcff\udc80\n',
        "diff --git a/\ud800 b/\ud800\n",
    ],
)
def test_malformed_patches_parse(patch):
    for fp in split_patch(patch):
        assert isinstance(fp.text, str)
    filter_patch(patch, ["conftest.py", "/x"])
    screened_files(patch)
    assert expansion_problem(patch) is None or "refused" in expansion_problem(patch)


def test_test_logs_and_reports_parse_to_fewer_results():
    assert parse_junit("<testsuite><testcase name='a'") == {}
    assert parse_junit("<" * 100000) == {}
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
        + "".join(
            f'<!ENTITY {c} "{("&" + p + ";") * 10}">'
            for p, c in zip("abcdefg", "bcdefgh", strict=True)
        )
        + ']><testsuite><testcase name="&h;"/></testsuite>'
    )
    assert parse_junit(bomb) == {}  # expat refuses the entity expansion
    log = "= short test summary info =\nPASSED \u2028\nFAILED t::a" + "[" * 10000 + " - x\n"
    assert parse_log("pytest", log) == {"t::a" + "[" * 10000 + " - x": "FAILED"}


def test_code_our_parser_cannot_read_is_searched_as_text():
    """Syntax newer than the host's interpreter (3.12's ``type`` statement, under 3.11) may run
    in the task image: the framework names are found in its text."""
    newer = "type Alias = int\nimport _pytest.python as p\n"
    got = [str(f) for f in screen_source("pkg/m.py", newer, Added(whole=True))]
    assert got in (
        ["pkg/m.py:2: does not parse here and names '_pytest'"],
        ["pkg/m.py:2: imports test-framework internals (_pytest.python)"],  # a newer host
    )
    assert screen_source("pkg/m.py", "def f(:\n    return 1\n", Added(whole=True)) == []


def test_framework_code_the_file_already_had_is_not_the_agents():
    """A repository that ships its own pytest plugin: the diff touches another line of it."""
    pre = "def pytest_configure(config):\n    pass\n\nX = 1\n"
    post = pre.replace("X = 1", "X = 2")
    added = Added(numbers={4}, texts={"X = 2"})
    assert (
        screen(
            sources={"pkg/plugin.py": post},
            added={"pkg/plugin.py": added},
            pre={"pkg/plugin.py": pre},
        )
        == []
    )
    assert len(screen({"pkg/plugin.py": post}, {"pkg/plugin.py": added})) == 1  # no pre-image
    worse = post + "def pytest_configure(config):\n    pass\n"  # a second one, not on an added line
    got = screen({"pkg/plugin.py": worse}, {"pkg/plugin.py": added}, {"pkg/plugin.py": pre})
    assert [f.line for f in got] == [5]
