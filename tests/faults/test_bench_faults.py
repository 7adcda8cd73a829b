"""``bench faults``: the real run meets every target; with a path broken on purpose (a record
after the fault not written) it misses ``rows_lost`` and exits 1."""

from __future__ import annotations

import json

import pytest
from support.children import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.agents, pytest.mark.slow]


def bench(*args: str) -> tuple[int, dict, str]:
    r = run_cli("bench", "faults", "--json", *args)
    return r.returncode, json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_bench_faults_meets_its_targets_and_a_broken_path_misses(example_images):
    rc, result, err = bench()
    assert rc == 0, err[-3000:]
    assert result["targets_missed"] == [] and set(result["faults"]) == {
        "policy_503",
        "adapter_kill",
    }
    for figures in result["faults"].values():
        assert figures["in_flight"] >= 1 and figures["recovery_s"] is not None, figures
    rc, result, err = bench("--faults", "policy_503", "--break", "drop-row")
    assert rc == 1 and result["faults"]["policy_503"]["rows_lost"] == 1, result
    assert any("rows_lost" in m for m in result["targets_missed"]), result
    assert "target missed" in err
