"""The grader's pytest plugin and its channel, on this machine: a real pytest in a subprocess, the
plugin copy loaded through ``PYTEST_PLUGINS`` exactly as in the sandbox, the key and the channel
on inherited descriptors 198/199 (as the root-side runner script hands them over)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from coding_agent_rl.grading import channel
from coding_agent_rl.grading import runner as grading_runner
from coding_agent_rl.grading.evidence import plugin_verdict
from coding_agent_rl.sandbox.capped_read import Capped

TESTS = textwrap.dedent("""
    import pytest

    def test_ok():
        assert 1 + 1 == 2

    def test_bad():
        assert 1 + 1 == 3

    @pytest.mark.parametrize("n", [1, 2])
    def test_param(n):
        assert n == 1

    @pytest.mark.xfail(reason="known")
    def test_known():
        assert False

    @pytest.fixture
    def broken():
        raise RuntimeError("setup fails")

    def test_setup_error(broken):
        pass
""")


def run_with_plugin(
    project: pathlib.Path,
    key: bytes,
    *args: str,
    env: dict[str, str] | None = None,
    new: tuple[str, ...] = (),
) -> tuple[int, bytes, str]:
    """pytest on ``project`` with the grader's plugin; returns (exit code, channel bytes, log)."""
    module = channel.new_module_name()
    plugin_dir = project.parent / "plugin"
    plugin_dir.mkdir(exist_ok=True)
    new_list = project.parent / "new.z"
    new_list.write_bytes(b"".join(f.encode() + b"\0" for f in new))
    (plugin_dir / f"{module}.py").write_text(
        channel.plugin_source(str(project), ("test_things.py",), str(new_list))
    )
    chan = project.parent / "chan"
    chan.write_bytes(b"")
    key_file = project.parent / "key"
    key_file.write_bytes(key)
    ch = os.open(chan, os.O_WRONLY | os.O_APPEND)
    kf = os.open(key_file, os.O_RDONLY)
    os.dup2(ch, channel.CHANNEL_FD)
    os.dup2(kf, channel.KEY_FD)
    os.close(ch)
    os.close(kf)
    try:
        full_env = {
            **os.environ,
            "PYTEST_PLUGINS": module,
            "PYTHONPATH": str(plugin_dir),
            "PYTHONSAFEPATH": "1",
            **(env or {}),
        }
        full_env.pop("PYTEST_ADDOPTS", None)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *args],
            cwd=project,
            env=full_env,
            capture_output=True,
            text=True,
            pass_fds=(channel.CHANNEL_FD, channel.KEY_FD),
            timeout=120,
        )
    finally:
        os.close(channel.CHANNEL_FD)
        os.close(channel.KEY_FD)
    return proc.returncode, chan.read_bytes(), proc.stdout + proc.stderr


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    p = tmp_path / "repo"
    p.mkdir()
    (p / "test_things.py").write_text(TESTS)
    (p / "pytest.ini").write_text("[pytest]\n")  # rootdir here, not in this repository
    return p


def test_records_every_outcome_and_the_final_exit_status(project):
    key = channel.new_key()
    rc, data, log = run_with_plugin(project, key, "test_things.py")
    records = channel.read_records(data, key)
    assert records.forged == [] and records.missing == [], log
    assert records.tests == {
        "test_things.py::test_ok": "PASSED",
        "test_things.py::test_bad": "FAILED",
        "test_things.py::test_param[1]": "PASSED",
        "test_things.py::test_param[2]": "FAILED",
        "test_things.py::test_known": "XFAIL",
        "test_things.py::test_setup_error": "ERROR",
    }
    assert rc == 1 and records.final == {**records.final, "exitstatus": 1, "tests": 6}
    assert records.collected is not None and len(records.collected) == 6
    assert records.start["safe_path"] == (sys.version_info >= (3, 11))
    assert channel.exit_status_problem(records, rc) is None
    # The same statuses as the -rA summary in the log (what round 1 parsed).
    from coding_agent_rl.datasets.logparse import parse_pytest

    assert parse_pytest(log) == records.tests


def test_the_key_never_reaches_the_tests(project):
    """Tests cannot read the key from the environment, argv, or the (closed) descriptor."""
    (project / "test_things.py").write_text(
        textwrap.dedent("""
        import os, sys

        def test_look_for_the_key():
            key = open(os.environ["CAR_TEST_HINT"]).read()  # the harness told us, to check
            assert key not in repr(dict(os.environ))
            assert key not in " ".join(sys.argv)
            try:
                os.read(199, 100)
            except OSError:
                pass
            else:
                raise AssertionError("descriptor 199 is still open")
    """)
    )
    key = channel.new_key()
    hint = project.parent / "hint"
    hint.write_text(key.decode()[:32])
    rc, data, log = run_with_plugin(project, key, env={"CAR_TEST_HINT": str(hint)})
    assert rc == 0, log
    assert channel.read_records(data, key).tests == {
        "test_things.py::test_look_for_the_key": "PASSED"
    }


def test_a_forged_line_and_a_rewritten_report_are_evidence(project):
    (project / "conftest.py").write_text(
        textwrap.dedent("""
        import os
        import pytest

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            outcome.get_result().outcome = "passed"

        def pytest_sessionfinish(session):
            for fd in range(3, 400):
                try:
                    os.write(fd, b'{"k":"final","n":99,"exitstatus":0,"m":"' + b"0" * 64 + b'"}\\n')
                except OSError:
                    pass
    """)
    )
    key = channel.new_key()
    rc, data, log = run_with_plugin(project, key, "test_things.py")
    records = channel.read_records(data, key)
    assert rc == 0, log  # the hook made pytest itself believe everything passed
    # start, collected, six tests, then the forged line (before the real final record)
    assert records.forged == ["line 9 of the result channel fails verification"], data
    assert "test_things.py::test_bad" in records.rewritten
    run = grading_runner.TestRun(
        rc, False, log, None, 1.0, channel=Capped(data, len(data), 1 << 20)
    )
    row = _row()
    verdict = plugin_verdict(row, run, key, (), 60)
    assert any("fails verification" in e for e in verdict.evidence)
    assert any("changed after pytest made it" in e for e in verdict.evidence)


def test_the_plugin_removes_new_modules_its_own_interpreter_would_be_shadowed_by(project):
    """The root-side check runs the image's python3; the tests may run another interpreter (a
    conda env) with other distributions. The plugin re-checks with its own and removes what it
    finds before any repository code is imported."""
    (project / "iniconfig.py").write_text("raise SystemExit('shadowed!')\n")  # pytest's own dep
    (project / "test_extra.py").write_text("def test_free():\n    pass\n")
    (project / "helpers.py").write_text("X = 1\n")
    key = channel.new_key()
    new = ("iniconfig.py", "test_extra.py", "helpers.py")
    rc, data, log = run_with_plugin(project, key, "test_things.py", new=new)
    records = channel.read_records(data, key)
    assert sorted(records.removed) == [
        ("iniconfig.py", "shadows the installed or standard module 'iniconfig'"),
        ("test_extra.py", "new test module"),
    ], log
    assert not (project / "iniconfig.py").exists() and (project / "helpers.py").exists()
    assert rc == 1 and records.final is not None


def test_records_without_the_key_or_out_of_order_are_rejected():
    key = channel.new_key()
    other = channel.new_key()
    good = _signed(key, [{"k": "start", "n": 0}, {"k": "final", "n": 1, "records": 2}])
    assert channel.read_records(good, key).forged == []
    assert channel.read_records(good, other).forged == [
        "line 1 of the result channel fails verification",
        "line 2 of the result channel fails verification",
    ]
    lines = good.splitlines(keepends=True)
    swapped = channel.read_records(lines[1] + lines[0], key)
    assert swapped.forged and swapped.final is None  # each MAC covers its predecessor's
    gap = _signed(key, [{"k": "start", "n": 0}, {"k": "final", "n": 2, "records": 3}])
    assert channel.read_records(gap, key).missing == ["records 1..2 missing"]


def test_exit_status_must_agree_with_the_records():
    def recs(exitstatus, **tests):
        r = channel.Records(final={"exitstatus": exitstatus})
        r.tests = dict(tests)
        return r

    assert channel.exit_status_problem(recs(0, a="PASSED"), 0) is None
    assert channel.exit_status_problem(recs(1, a="FAILED"), 1) is None
    assert "exited 0 although tests failed" in channel.exit_status_problem(recs(0, a="FAILED"), 0)
    assert "ended with status 1" in channel.exit_status_problem(recs(1, a="FAILED"), 0)
    assert "no test failed" in channel.exit_status_problem(recs(1, a="PASSED"), 1)


def _signed(key: bytes, bodies: list[dict]) -> bytes:
    import hashlib
    import hmac
    import json

    out, mac = b"", b""
    for body in bodies:
        text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        mac = hmac.new(key, mac + text, hashlib.sha256).hexdigest().encode()
        out += text[:-1] + b',"m":"' + mac + b'"}\n'
    return out


def _row():
    from coding_agent_rl.datasets.schema import parse_row

    md = {
        "instance_id": "t",
        "image": "x",
        "workdir": "/w",
        "problem_statement": "p",
        "fail_to_pass": ["test_things.py::test_bad"],
        "pass_to_pass": ["test_things.py::test_ok"],
    }
    return parse_row({"metadata": md}, base_dir=pathlib.Path("."))
