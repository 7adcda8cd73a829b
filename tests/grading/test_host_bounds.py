"""Nothing the agent writes grows the runner host without a bound: the screen runs off the event
loop in a worker with memory and CPU limits, its findings are capped (with a total), and a
results line stays small whatever the diff."""

from __future__ import annotations

import asyncio
import base64
import json
import resource
import sys
import time

import pytest

from coding_agent_rl.errors import GradingError
from coding_agent_rl.grading import screen as screen_mod
from coding_agent_rl.grading.after_apply import screen_post_images
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.result import MAX_ITEMS, GradeResult
from coding_agent_rl.grading.screen import Added, screen, screen_off_loop

FLAT = "x = 1\n" * (90 * 1024)  # ~540 KB of flat Python
MANY = "X = [" + "'_pytest'," * 25_000 + "]\n"  # 25,000 findings in 250 KB


async def max_tick_gap(work) -> float:
    """The longest the event loop went without running a 10 ms ticker while ``work`` ran."""
    gaps = [0.0]
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    await work()
    stop.set()
    await task
    return max(gaps)


async def test_the_screen_runs_off_the_event_loop():
    added = {"pkg/big.py": Added(whole=True)}
    sources = {"pkg/big.py": FLAT + "import pluggy\n"}

    async def in_loop() -> None:  # what the grader did: parse in the runner's event loop
        assert len(screen(sources, added)) == 1

    async def off_loop() -> None:
        found, total = await screen_off_loop(sources, added)
        assert total == 1 and "pluggy" in found[0].what

    blocked = await max_tick_gap(in_loop)
    free = await max_tick_gap(off_loop)
    assert free * 5 < blocked, (free, blocked)


async def test_the_worker_is_held_to_its_memory_limit(monkeypatch):
    host_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    monkeypatch.setattr(screen_mod, "WORKER_MEMORY", 128 * 1024**2)
    found, total = await screen_off_loop({"big.py": FLAT}, {"big.py": Added(whole=True)})
    assert total == 1
    assert "cannot be screened (MemoryError)" in found[0].what or "worker failed" in found[0].what
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - host_before
    assert grown_kib < 150 * 1024  # the parse (~400 MB) never happened in this process


async def test_a_hundred_thousand_findings_make_a_small_results_line():
    result = GradeResult()
    data = base64.b64encode(MANY.encode()).decode()
    head = "".join(f"CAR-SRC:{i} {len(MANY)}\n{data}\n" for i in range(4))
    added = {f"pkg/m{i}.py": Added(whole=True) for i in range(4)}
    await screen_post_images(result, head, added, Defences())
    result.cap()
    line = json.dumps(result.record_fields())
    assert result.reward == 0.0 and result.failure_kind == "model"
    assert result.screen_findings_total == 100_000
    assert len(result.screen_findings) == len(result.tampering) <= MAX_ITEMS
    assert len(line) < 64 * 1024 and len(result.reason) < 2100


async def test_a_worker_that_cannot_start_is_the_hosts_failure(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    with pytest.raises(GradingError, match="cannot start the screen's worker"):
        await screen_off_loop({"m.py": "x = 1\n"}, {"m.py": Added(whole=True)})
