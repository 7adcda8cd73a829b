"""A PyPI CLI's folder in the host cache, built by the real pip from a synthetic wheel (a local
find-links folder instead of the index): installed, launcher written, byte-compiled, rebuilt
under a new name when the lock changes; the launcher runs it isolated from ``PYTHONPATH``."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

from coding_agent_rl.harness import pyvenv

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"  # byte-compiled only for this minor version
PKG = pyvenv.PyPackage(
    name="example-cli",
    version="1.0",
    entry="example_cli:main",
    lock=("example-cli==1.0",),
    python=PY,
)


def make_wheel(folder: pathlib.Path, body: str) -> None:
    dist = "example_cli-1.0.dist-info"
    with zipfile.ZipFile(folder / "example_cli-1.0-py3-none-any.whl", "w") as z:
        z.writestr("example_cli/__init__.py", body)
        z.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: example-cli\nVersion: 1.0\n")
        z.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{dist}/RECORD", "")


@pytest.fixture
def index(tmp_path, monkeypatch):
    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(tmp_path / "cache"))
    links = tmp_path / "links"
    links.mkdir()
    make_wheel(
        links,
        "import sys\ndef main():\n    print('example', sys.argv[1:], 'rich' in sys.modules)\n",
    )
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def test_build_installs_the_lock_once_and_the_launcher_runs_it_isolated(
    index, tmp_path, monkeypatch
):
    assert pyvenv.state(PKG) == "not fetched"
    folder = pyvenv.build(PKG)
    assert pyvenv.state(PKG) == f"ready ({folder})"
    assert (folder / ".complete").read_text() == "example-cli==1.0\n"
    site = folder / "site-packages"
    assert (site / "example_cli" / "__init__.py").is_file()
    assert list((site / "example_cli" / "__pycache__").glob("__init__.cpython-*.pyc"))
    assert not (site / "bin").exists() and oct((folder / "run.py").stat().st_mode)[-3:] == "644"
    # A poisoned module on PYTHONPATH is not seen with -I -S; the arguments pass through.
    poison = tmp_path / "poison"
    (poison / "example_cli").mkdir(parents=True)
    (poison / "example_cli" / "__init__.py").write_text("raise SystemExit('POISONED')\n")
    env = {**os.environ, "PYTHONPATH": str(poison)}
    run = [sys.executable, "-I", "-S", str(folder / "run.py"), "--flag"]
    out = subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout
    assert out == "example ['--flag'] False\n"
    # A build that is complete is not redone (no pip: the index is gone).
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    assert pyvenv.build(PKG) == folder


def test_a_changed_lock_is_a_new_folder_and_a_missing_wheel_is_named(index):
    first = pyvenv.build(PKG)
    other = dataclasses.replace(PKG, lock=("example-cli==1.0", "not-there==9.9"))
    assert pyvenv.folder(other) != first
    with pytest.raises(pyvenv.cache.FetchError, match=r"(?s)pip download failed.*not-there"):
        pyvenv.build(other)
    assert pyvenv.state(other) == "not fetched"
    assert [p.name for p in first.parent.iterdir() if p.name.startswith(".build-")] == []
