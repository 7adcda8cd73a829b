"""Patch text handling: splitting, paths (incl. git's quoting), protected filtering, reversal."""

from __future__ import annotations

import subprocess

import pytest

from coding_agent_rl.patches.files import filter_patch, patch_paths, path_matches, split_patch
from coding_agent_rl.patches.reverse import reverse_patch


def git(cwd, *args, input=None):
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        input=input,
        text=input is None or isinstance(input, str),
    ).stdout


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mod.py").write_text("def f():\n    return 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text("def test_f():\n    assert True\n")
    (tmp_path / "tést file.py").write_text("x = 1\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return tmp_path


def real_diff(repo):
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", "--binary")


def test_paths_of_a_real_git_diff_with_quoting_binary_and_deletion(repo):
    (repo / "src" / "mod.py").write_text("def f():\n    return 2\n")
    (repo / "tést file.py").write_text("x = 2\n")
    (repo / "blob.bin").write_bytes(b"\x00\x01\xff" * 10)
    (repo / "tests" / "test_mod.py").unlink()
    (repo / "conftest.py").write_text("import pytest\n")
    sections = split_patch(real_diff(repo))
    assert {s.old_path or s.new_path for s in sections} == {
        "src/mod.py",
        "tést file.py",
        "blob.bin",
        "tests/test_mod.py",
        "conftest.py",
    }
    by_path = {(s.old_path or s.new_path): s for s in sections}
    assert by_path["blob.bin"].old_path is None  # a new file
    assert by_path["tests/test_mod.py"].new_path is None  # a deletion


def test_filter_drops_protected_sections_and_the_rest_still_applies(repo):
    (repo / "src" / "mod.py").write_text("def f():\n    return 2\n")
    (repo / "tests" / "test_mod.py").write_text("def test_f():\n    assert 1 == 1\n")
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "pkg" / "sub" / "conftest.py").write_text("x = 1\n")
    diff = real_diff(repo)
    kept, dropped = filter_patch(diff, ["/tests/test_mod.py", "conftest.py"])
    assert sorted(dropped) == ["pkg/sub/conftest.py", "tests/test_mod.py"]
    assert patch_paths(kept) == ["src/mod.py"]
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-fdq")
    git(repo, "apply", "--check", "-", input=kept)


@pytest.mark.parametrize(
    "path, patterns, expected",
    [
        ("conftest.py", ["conftest.py"], True),
        ("a/b/conftest.py", ["conftest.py"], True),
        ("a/conftest.pyc", ["conftest.py"], False),
        ("tests/test_x.py", ["/tests/test_x.py"], True),
        ("other/tests/test_x.py", ["/tests/test_x.py"], False),
        ("foo.egg-info/entry_points.txt", ["*.egg-info/"], True),
        ("src/site.pth", ["*.pth"], True),
        ("./tests//test_x.py", ["/tests/test_x.py"], True),
        (".harness/log.txt", ["/.harness/"], True),
        ("harness/log.txt", ["/.harness/"], False),
        ("tests/test_x.cpython-311-x86_64-linux-gnu.so", ["/tests/test_x.*"], True),
        ("tests/test_[a].py", ["/tests/test_[[]a].py"], True),
    ],
)
def test_path_matches(path, patterns, expected):
    assert path_matches(path, patterns) is expected


def test_reverse_patch_undoes_a_real_diff(repo):
    (repo / "src" / "mod.py").write_text("def f():\n    return 2\n# more\n")
    (repo / "new.py").write_text("print('new')\n")
    (repo / "tests" / "test_mod.py").unlink()
    forward = real_diff(repo)  # the change is now staged and in the worktree
    back = reverse_patch(forward)
    git(repo, "apply", "--index", "-", input=back)
    assert git(repo, "status", "--porcelain") == ""


def test_reverse_refuses_binary(repo):
    (repo / "blob.bin").write_bytes(b"\x00\xff")
    with pytest.raises(ValueError):
        reverse_patch(real_diff(repo))


def test_plain_unified_diff_without_git_headers():
    text = "--- a/x.py\t2024-01-01\n+++ b/x.py\t2024-01-02\n@@ -1 +1 @@\n-a\n+b\n"
    assert patch_paths(text) == ["x.py"]
