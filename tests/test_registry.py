"""Registries: an entry point that fails to load is reported by name, never dropped."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest

from coding_agent_rl.cli import main
from coding_agent_rl.registry import UnknownName
from coding_agent_rl.sandbox import BACKENDS

GROUP = "coding_agent_rl.sandboxes"


@pytest.fixture
def broken_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.entry_points
    broken = importlib.metadata.EntryPoint(
        name="cloudy", value="cloudy_sandbox_pkg.backend:CloudySandbox", group=GROUP
    )

    def entry_points(**params: Any) -> Any:
        if params.get("group") == GROUP:
            return importlib.metadata.EntryPoints([broken])
        return real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_a_broken_entry_point_is_named_in_help(broken_backend, capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "sandbox backend 'cloudy'" in out and "No module named 'cloudy_sandbox_pkg'" in out


def test_help_is_quiet_when_every_entry_point_loads(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "failed to load" not in capsys.readouterr().out


def test_unknown_backend_error_lists_what_failed_to_load(broken_backend):
    assert BACKENDS.failures() == {
        "cloudy": "ModuleNotFoundError: No module named 'cloudy_sandbox_pkg'"
    }
    with pytest.raises(UnknownName) as e:
        BACKENDS.load("cloud")
    msg = str(e.value)
    assert "known: cloudy, docker, e2b, local" in msg
    assert "failed to load: cloudy: ModuleNotFoundError" in msg
    assert "\n" not in msg


def test_the_builtins_stay_when_the_metadata_itself_breaks(monkeypatch):
    def broken(**params: Any) -> Any:
        raise RuntimeError("corrupt METADATA")

    monkeypatch.setattr(importlib.metadata, "entry_points", broken)
    assert BACKENDS.names() == ["docker", "e2b", "local"]
    assert "corrupt METADATA" in BACKENDS.describe_failures()
