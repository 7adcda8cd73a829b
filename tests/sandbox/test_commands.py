"""The `images`, `sandboxes` and `bench sandbox` subcommands through the real CLI entry point."""

from __future__ import annotations

import json

import pytest
from support import BASE_IMAGE

from coding_agent_rl.cli import main


@pytest.mark.docker
def test_images_base_reuses_the_existing_image(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["images", "base"]) == 0
    assert capsys.readouterr().out.strip() == BASE_IMAGE


def test_images_build_needs_a_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["images", "build"])
    assert "--dataset" in capsys.readouterr().err


def test_bench_rejects_unknown_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "nope"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.docker
def test_bench_sandbox_prints_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    # --no-check: two samples on a shared machine say nothing about the targets.
    assert main(["bench", "sandbox", "--n", "2", "--json", "--no-check"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    result = json.loads(line)
    for key in (
        "exec_ms_p50",
        "cli_exec_ms_p50",
        "lifecycle_ms_p50",
        "cli_lifecycle_ms_p50",
        "completion_detect_ms_p50",
        "exec_ratio",
        "lifecycle_ratio",
    ):
        assert result[key] > 0, key
    assert result["completion_detect_ms_p50"] < 5000
    assert result["baseline"]["kind"] == "run" and "docker exec" in result["baseline"]["from"]
    assert set(result["targets"]) == {"exec_ratio", "lifecycle_ratio", "completion_detect_ms_p50"}
