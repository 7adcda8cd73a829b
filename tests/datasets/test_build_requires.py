"""What each backend's build environment needs, read from the repositories the backend tests
build (support/backend_repos.py) and from setup.cfg / setup.py / hatch hooks variants."""

from __future__ import annotations

import pytest
from support.backend_repos import FILES

from coding_agent_rl.datasets.build_requires import LEGACY, build_requirements
from coding_agent_rl.datasets.recipes import install_script, pretend_version, recipe_for

EXPECTED = {
    "flit": ("flit_core.buildapi", ("flit_core>=3.4,<5",), False),
    "hatchling": ("hatchling.build", ("hatchling", "editables~=0.3"), False),
    "poetry": ("poetry.core.masonry.api", ("poetry-core>=1.0.0",), False),
    "pdm": ("pdm.backend", ("pdm-backend",), False),
    "scm": ("setuptools.build_meta", ("setuptools>=64", "setuptools-scm>=8"), True),
    "hatch-vcs": ("hatchling.build", ("hatchling", "hatch-vcs", "editables~=0.3"), True),
    "setuptools": ("setuptools.build_meta", ("setuptools>=64",), False),
    "setup-py": ("setuptools.build_meta:__legacy__", (*LEGACY, "setuptools-scm"), True),
    "scikit-build": (
        "scikit_build_core.build",
        ("scikit-build-core>=0.10", "cmake>=3.15", "ninja>=1.5"),
        False,
    ),
}


@pytest.mark.parametrize("backend", sorted(FILES))
def test_each_backend(tmp_path, backend):
    for name, text in FILES[backend].items():
        (tmp_path / name).write_text(text)
    got = build_requirements(tmp_path)
    assert (got.backend, got.requires, got.vcs_version) == EXPECTED[backend]


def test_setup_cfg_and_hook_dependencies(tmp_path):
    (tmp_path / "setup.cfg").write_text(
        "[metadata]\nname = x\n\n[options]\nsetup_requires =\n    cython>=3\n"
        "    numpy; python_version>'3.8'\n"
    )
    (tmp_path / "setup.py").write_text(
        "import setuptools\nreqs = ['dynamic']\nsetuptools.setup(setup_requires=reqs)\n"
    )
    assert build_requirements(tmp_path).requires == (
        *LEGACY,
        "cython>=3",
        "numpy; python_version>'3.8'",
    )  # the non-literal setup_requires of setup.py is not guessed
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[tool.hatch.build.hooks.custom]\ndependencies = ["jinja2"]\n'
        '[tool.hatch.build.targets.wheel.hooks.mypyc]\ndependencies = ["hatch-mypyc"]\n'
    )
    # A hatchling project's setup.cfg is not setuptools' business.
    assert build_requirements(tmp_path).requires == (
        "hatchling",
        "editables~=0.3",
        "jinja2",
        "hatch-mypyc",
    )


def test_a_pyproject_without_build_system_gets_pips_default(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 99\n")
    assert build_requirements(tmp_path).requires == LEGACY


def test_bad_toml_is_a_one_line_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[build-system\n")
    with pytest.raises(ValueError, match=r"^pyproject.toml: not valid TOML"):
        build_requirements(tmp_path)


def test_the_version_reaches_the_install(tmp_path):
    (tmp_path / "pyproject.toml").write_text(FILES["scm"]["pyproject.toml"])
    recipe = recipe_for({"version": "4.2"}, tmp_path)
    assert recipe.build_requires == ("setuptools>=64", "setuptools-scm>=8")
    script = install_script(recipe, "/testbed", "/tmp/w")
    assert "export SETUPTOOLS_SCM_PRETEND_VERSION=4.2 PDM_BUILD_SCM_VERSION=4.2" in script
    assert [pretend_version(v) for v in ("v1.2.3", "0.13", "dev", None, "1.0rc1")] == [
        "1.2.3",
        "0.13",
        "0.0.0",
        "0.0.0",
        "1.0rc1",
    ]
