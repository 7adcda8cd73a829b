"""The one settings object: nothing else reads the environment, the docs table is current,
slime's variable names are honoured, bad values are one line naming the variable."""

from __future__ import annotations

import ast
import pathlib

import pytest

import coding_agent_rl
from coding_agent_rl import settings
from coding_agent_rl.errors import UserError

PACKAGE = pathlib.Path(coding_agent_rl.__file__).parent
ROOT = PACKAGE.parent
# Runs inside the grading sandbox's own Python (the package is not installed there): it
# unsets PYTEST_PLUGINS so that pytest runs it loads do not load it twice.
EXEMPT = {"settings.py", "grading/pytest_plugin.py"}


def environment_reads(tree: ast.AST) -> list[int]:
    """Lines that touch ``os.environ`` / ``os.getenv`` / ``environ`` imported from os."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb")) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(a.name in ("environ", "getenv", "environb") for a in node.names)
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_environment_reads_outside_settings():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in EXEMPT or rel.startswith("datasets/examples/"):
            continue
        for line in environment_reads(ast.parse(path.read_text(), str(path))):
            found.append(f"{rel}:{line}")
    assert not found, f"read the environment through coding_agent_rl.settings: {found}"


def test_the_scan_finds_each_way_of_reading_the_environment():
    src = "import os\nfrom os import environ\nos.environ.get('X')\nos.getenv('Y')\n"
    assert environment_reads(ast.parse(src)) == [2, 3, 4]


def test_the_settings_table_is_current():
    path = ROOT / "docs" / "settings.md"
    assert path.read_text() == settings.markdown_table(), (
        "docs/settings.md is stale: run `python -m coding_agent_rl.settings`"
    )
    for name in settings.Settings.model_fields:
        assert f"| `{name}` |" in path.read_text()


def test_slimes_names_are_aliases_and_ours_win(monkeypatch):
    monkeypatch.setenv("SWE_AGENT_TIME_BUDGET_SEC", "42")
    monkeypatch.setenv("SWE_BOOT_CONCURRENCY", "3")
    monkeypatch.setenv("SLIME_AGENT_CC_EXTRA_ARGS", "--verbose")
    monkeypatch.setenv("ADAPTER_PUBLIC_HOST", "10.0.0.5")
    conf = settings.load()
    assert (conf.agent_budget_s, conf.boot_concurrency) == (42.0, 3)
    assert conf.agent_var("SLIME_AGENT_CC_EXTRA_ARGS") == "--verbose"
    assert conf.adapter_public_host == "10.0.0.5"
    monkeypatch.setenv("CODING_AGENT_RL_AGENT_BUDGET_S", "7")
    assert settings.load().agent_budget_s == 7.0


def test_settings_travel_as_json_to_a_worker(monkeypatch):
    monkeypatch.setenv("CODING_AGENT_RL_SANDBOX_OPTIONS", '{"memory": "8g"}')
    monkeypatch.setenv("SLIME_AGENT_CODEX_TARBALL", "/tmp/codex.tgz")
    conf = settings.load(sandbox="local")
    payload = conf.model_dump(mode="json")
    monkeypatch.delenv("CODING_AGENT_RL_SANDBOX_OPTIONS")
    again = settings.Settings.model_validate(payload)
    assert again == conf and again.sandbox_options == {"memory": "8g"}
    with pytest.raises(Exception, match="frozen"):
        conf.sandbox = "docker"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        (
            "CODING_AGENT_RL_SANDBOX_OPTIONS",
            "{memory: 8g}",
            "CODING_AGENT_RL_SANDBOX_OPTIONS: not valid JSON",
        ),
        ("CODING_AGENT_RL_SANDBOX_OPTIONS", "[1]", "must be a JSON object"),
        ("SWE_BOOT_CONCURRENCY", "many", "SWE_BOOT_CONCURRENCY: Input should be a valid integer"),
        ("SWE_EVAL_TIMEOUT_SEC", "soon", "SWE_EVAL_TIMEOUT_SEC"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch, var, value, words):
    monkeypatch.setenv(var, value)
    with pytest.raises(UserError) as e:
        settings.load()
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_cli_reports_a_bad_setting_in_one_line(monkeypatch, capsys):
    from coding_agent_rl.cli import main

    monkeypatch.setenv("SWE_BOOT_CONCURRENCY", "many")
    assert main(["sandboxes", "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "SWE_BOOT_CONCURRENCY" in err


def test_an_installed_settings_object_is_what_every_layer_sees(monkeypatch, tmp_path):
    from coding_agent_rl.harness.cache import agents_dir
    from coding_agent_rl.sandbox import rootfs

    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(tmp_path / "from-env"))
    with settings.using(settings.Settings(cache_root=tmp_path / "installed")):
        assert agents_dir() == tmp_path / "installed" / "agents"
        assert rootfs.store() == tmp_path / "installed" / "rootfs"
    assert agents_dir() == tmp_path / "from-env" / "agents"
