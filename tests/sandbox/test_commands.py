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
        "sdk_exec_ms_p50",
        "sdk_lifecycle_ms_p50",
        "sdk_exec_ratio",
        "sdk_lifecycle_ratio",
    ):
        assert result[key] > 0, key
    assert result["completion_detect_ms_p50"] < 5000
    assert result["baseline"]["kind"] == "run" and "docker exec" in result["baseline"]["from"]
    assert "docker SDK used directly" in result["baseline"]["from"]
    assert set(result["targets"]) == {
        "exec_ratio",
        "lifecycle_ratio",
        "sdk_exec_ratio",
        "sdk_lifecycle_ratio",
        "completion_detect_ms_p50",
    }


@pytest.mark.docker
def test_bench_sandbox_slowed_exec_misses_and_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our exec path slowed by 300 ms on purpose: both exec targets are missed, exit 1."""
    import asyncio

    from coding_agent_rl.sandbox.docker import DockerSandbox

    real = DockerSandbox._exec

    async def slow(self, *args, **kwargs):
        await asyncio.sleep(0.3)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(DockerSandbox, "_exec", slow)
    assert main(["bench", "sandbox", "--n", "2", "--json"]) == 1
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    missed = {m.split()[0] for m in result["targets_missed"]}
    assert {"exec_ratio", "sdk_exec_ratio"} <= missed and "exit 1" in captured.err
