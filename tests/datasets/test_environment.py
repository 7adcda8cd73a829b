"""The environment resolver on synthetic repositories: requirements files (``-r``/``-c``/
``-e .[x]`` relative to the repository), PEP 735 groups and their include cycles, lock pins, tox
factor lines, ``requires-python``; bad files are one line naming them. The download tests run
real ``pip download`` against PyPI for Python 3.11 (no Docker)."""

from __future__ import annotations

import pathlib
import textwrap

import pytest

from coding_agent_rl.datasets.environment import resolve
from coding_agent_rl.datasets.recipes import install_script, recipe_for
from coding_agent_rl.images.common import ImageBuildError
from coding_agent_rl.images.wheelset import download

PLATFORM = ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp"]
PLATFORM += ["--abi", "cp311", "--abi", "abi3", "--abi", "none"]
PLATFORM += ["--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]


def write(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


PROJECT = (
    '[project]\nname = "demo"\nversion = "1.0"\ndescription = "d"\nrequires-python = ">=3.9"\n'
)
PROJECT += '[project.optional-dependencies]\nsocks = ["six"]\n'
PROJECT += (
    '[build-system]\nrequires = ["flit_core>=3.2,<4"]\nbuild-backend = "flit_core.buildapi"\n'
)


def test_requirements_files_resolve_relative_to_the_repository(tmp_path, monkeypatch):
    repo = write(
        tmp_path / "repo",
        {
            "pyproject.toml": PROJECT,
            "requirements.txt": "-r requirements/base.txt\n-c constraints.txt\n-e .[socks]\n",
            "requirements/base.txt": "-r ../requirements/more.txt\nattrs>=20  # comment\n",
            "requirements/more.txt": "iniconfig\n-r base.txt\n",  # a cycle, followed once
            "constraints.txt": "attrs==23.2.0\n",
        },
    )
    monkeypatch.chdir(pathlib.Path(__file__).parents[2])  # a project with extras of its own
    env = resolve(repo, "3.11")
    assert env.extras == ["socks"]
    assert [(r.spec, r.source) for r in env.requirements] == [
        ("iniconfig", "requirements/more.txt"),
        ("attrs>=20", "requirements/base.txt"),
    ]
    assert env.pins == {"attrs": ("23.2.0", "constraints.txt")}
    recipe = recipe_for({}, repo)
    assert recipe.install == "python -m pip install -e '.[socks]'"
    script = install_script(recipe, "/testbed", "/tmp/w")
    assert "-c /tmp/w/car-constraints.txt -r /tmp/w/car-requirements.txt -e '.[socks]'" in script


def test_a_missing_r_file_names_itself(tmp_path):
    write(tmp_path, {"requirements.txt": "-r nope.txt\n"})
    with pytest.raises(ValueError, match=r"^nope.txt: named by -r/-c but missing$"):
        recipe_for({}, tmp_path)


def test_dependency_groups_follow_include_group(tmp_path):
    write(
        tmp_path,
        {
            "pyproject.toml": PROJECT
            + '[dependency-groups]\ntests = ["pytest>=8", {include-group = "cov"}]\n'
            + 'cov = ["pytest-cov"]\ndocs = ["sphinx"]\ndev = [{include-group = "docs"}]\n'
        },
    )
    env = resolve(tmp_path, "3.11")
    assert [r.spec for r in env.requirements] == ["pytest>=8", "pytest-cov"]
    assert env.sources == ["pyproject.toml [dependency-groups] tests"]


def test_an_include_group_cycle_is_one_line(tmp_path):
    groups = (
        '[dependency-groups]\ntests = [{include-group = "a"}]\na = [{include-group = "tests"}]\n'
    )
    write(tmp_path, {"pyproject.toml": PROJECT + groups})
    with pytest.raises(
        ValueError,
        match=r"^pyproject.toml: \[dependency-groups\] include-group "
        r"cycle: tests -> a -> tests$",
    ):
        recipe_for({}, tmp_path)


def test_a_lock_pins_the_test_runner(tmp_path):
    lock = """\
        version = 1
        requires-python = ">=3.9"
        [[package]]
        name = "demo"
        version = "1.0"
        source = { editable = "." }
        [[package]]
        name = "pytest"
        version = "8.0.2"
        source = { registry = "https://pypi.org/simple" }
        [[package]]
        name = "Exceptiongroup"
        version = "1.2.0"
        resolution-markers = ["python_full_version < '3.11'"]
        [[package]]
        name = "exceptiongroup"
        version = "1.3.0"
        resolution-markers = ["python_full_version >= '3.11'"]
    """
    write(tmp_path, {"pyproject.toml": PROJECT, "uv.lock": lock})
    recipe = recipe_for({}, tmp_path)
    assert ("pytest", "8.0.2", "uv.lock") in recipe.pins
    assert ("exceptiongroup", "1.3.0", "uv.lock") in recipe.pins
    assert not any(n == "demo" for n, _, _ in recipe.pins)  # the project itself
    assert "pytest==8.0.2  # uv.lock" in recipe.constraints_text()


def test_poetry_lock_and_pip_compile_output_pin(tmp_path):
    poetry = """\
        [[package]]
        name = "pytest"
        version = "7.4.4"
        [[package]]
        name = "demo"
        version = "1.0"
        [package.source]
        type = "directory"
        url = "."
        [metadata]
        python-versions = "^3.8"
    """
    compiled = "# This file is autogenerated by pip-compile with Python 3.11\niniconfig==2.0.0\n"
    files = {"pyproject.toml": PROJECT, "poetry.lock": poetry, "requirements-dev.txt": compiled}
    env = resolve(write(tmp_path, files), "3.11")
    assert env.pins == {
        "pytest": ("7.4.4", "poetry.lock"),
        "iniconfig": ("2.0.0", "requirements-dev.txt"),
    }
    assert ("^3.8", "poetry.lock") in env.requires_python
    assert recipe_for({}, tmp_path, "3.11").sources == ("poetry.lock", "requirements-dev.txt")


def test_a_bad_lock_or_pyproject_is_one_line(tmp_path):
    write(tmp_path, {"pyproject.toml": PROJECT, "uv.lock": "[[package]\n"})
    with pytest.raises(ValueError, match=r"^uv.lock: not valid TOML \(") as e:
        recipe_for({}, tmp_path)
    assert "\n" not in str(e.value)
    (tmp_path / "uv.lock").unlink()
    write(tmp_path, {"pyproject.toml": "[project\n"})
    with pytest.raises(ValueError, match=r"^pyproject.toml: not valid TOML \("):
        recipe_for({}, tmp_path)


def test_tox_factor_lines(tmp_path):
    tox = """\
        [testenv]
        deps =
            unit: pytest
            lint: ruff
            py311: iniconfig
            !unit: never
            matplotlib; python_version < "3.14"
        extras = unit: diagrams
    """
    write(tmp_path, {"pyproject.toml": PROJECT, "tox.ini": tox})
    env = resolve(tmp_path, "3.11")
    assert [r.spec for r in env.requirements] == [
        "pytest",
        "iniconfig",
        'matplotlib; python_version < "3.14"',
    ]
    assert env.extras == ["diagrams"] and env.sources == ["tox.ini [testenv]"]


def test_requires_python_that_no_image_python_meets_is_one_line(tmp_path):
    write(tmp_path, {"pyproject.toml": PROJECT.replace(">=3.9", ">=3.12")})
    with pytest.raises(ValueError) as e:
        recipe_for({}, tmp_path, "3.11")
    assert str(e.value) == (
        "pyproject.toml [project] requires Python >=3.12, but the base image has Python 3.11 "
        "(the only one obtainable offline)"
    )


def test_download_builds_sdists_drops_optional_and_names_a_missing_required(tmp_path):
    """Real pip against PyPI: mkautodoc 0.2.0 has only an sdist (built on the host), a docs pin
    that does not exist is dropped and recorded, a required one that does not exist fails in one
    line naming its file."""
    repo = write(
        tmp_path / "repo",
        {
            "pyproject.toml": PROJECT,
            "demo.py": "",
            "requirements.txt": "-e .[socks]\nmkautodoc==0.2.0\nsphinx==0.0.0.1\n",
        },
    )
    recipe = recipe_for({}, repo)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    got = download(recipe, repo, wheels, PLATFORM, "3.11", tmp_path / "log")
    assert got.built_from_sdist == ["mkautodoc==0.2.0"]
    assert got.dropped == [
        {
            "name": "sphinx",
            "source": "requirements.txt",
            "why": "no wheel for Python 3.11, and its sdist does not build as pure Python",
        }
    ]
    names = {w.name.split("-")[0].lower() for w in wheels.glob("*.whl")}
    assert {"mkautodoc", "six", "pytest", "markdown"} <= names  # six: the repository's [socks]
    assert "sphinx" not in (wheels / "car-requirements.txt").read_text()

    (repo / "requirements.txt").write_text("pytest-timeout==0.0.0.1\n")
    recipe = recipe_for({}, repo)
    with pytest.raises(ImageBuildError) as e:
        download(recipe, repo, wheels, PLATFORM, "3.11", tmp_path / "log")
    assert str(e.value).startswith(
        "pytest-timeout==0.0.0.1 (declared in requirements.txt) cannot be obtained: no wheel "
        "for Python 3.11"
    )
    assert "\n" not in str(e.value)


def test_a_docs_file_pulled_in_by_a_dev_file_is_optional(tmp_path):
    """pip-compile-multi's layout (a dev file with ``-r docs.txt -r tests.txt``):
    what only the docs file declares is dropped when unobtainable; the same name declared for
    the tests too fails, naming the tests' file. Real pip against PyPI."""
    compiled = "# This file is autogenerated by pip-compile-multi\n"
    repo = write(
        tmp_path / "repo",
        {
            "pyproject.toml": PROJECT,
            "demo.py": "",
            # read before requirements/tests.txt: the docs file comes first
            "requirements-dev.txt": compiled
            + "-r requirements/docs.txt\n-r requirements/tests.txt\n",
            "requirements/docs.txt": compiled + "markupsafe==0.0.0.1\n",
            "requirements/tests.txt": compiled + "iniconfig==2.0.0\n",
        },
    )
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    got = download(recipe_for({}, repo), repo, wheels, PLATFORM, "3.11", tmp_path / "log")
    assert [(d["name"], d["source"]) for d in got.dropped] == [
        ("markupsafe", "requirements/docs.txt")
    ]
    assert "iniconfig-2.0.0-py3-none-any.whl" in {w.name for w in wheels.glob("*.whl")}

    for tests, declared in [
        ("markupsafe==0.0.0.1\n", "requirements/tests.txt"),  # the tests name it too
        ("-r base.txt\n", "requirements/base.txt"),  # a file both include, read first for docs
    ]:
        (repo / "requirements/tests.txt").write_text(compiled + tests)
        (repo / "requirements/docs.txt").write_text(compiled + "-r base.txt\nmarkupsafe==0.0.0.1\n")
        (repo / "requirements/base.txt").write_text(compiled + "markupsafe==0.0.0.1\n")
        with pytest.raises(ImageBuildError) as e:
            download(recipe_for({}, repo), repo, wheels, PLATFORM, "3.11", tmp_path / "log")
        assert str(e.value).startswith(
            f"markupsafe==0.0.0.1 (declared in {declared}) cannot be obtained"
        ), e.value


def test_pips_conflict_report_names_the_package_it_cannot_install():
    from coding_agent_rl.images.wheelset import _MISSING

    line = (
        "ERROR: Cannot install markupsafe==2.0.1 because these package versions have "
        "conflicting dependencies."
    )
    m = _MISSING.search(line)
    assert m is not None and (m.group(1) or m.group(2)) == "markupsafe==2.0.1"
    assert _MISSING.search("ERROR: Cannot install a==1 and b==2 because these package") is None
