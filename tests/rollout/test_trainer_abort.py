"""slime's abort flag as rollouts poll it (``coding_agent_rl/trainer_abort.py``): read
from slime's own ``GenerateState`` (vendored slime), never imported by us; the rollout's work is
cancelled with its clean-up awaited. No Docker: the rollouts at every stage are in
``test_slime_fidelity.py``."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from support.rollout_helpers import EXAMPLES, dataset_lines
from support.slime_vendor import fresh_state, slime, slime_args

from coding_agent_rl import generate as gen
from coding_agent_rl import trainer_abort
from coding_agent_rl.errors import RolloutAborted


class Work:
    """A rollout stand-in that records whether it started and whether its clean-up ran."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = self.cleaned = self.cancelled = False

    async def __call__(self) -> str:
        self.started = True
        try:
            await asyncio.sleep(self.seconds)
            return "done"
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            await asyncio.sleep(0.05)  # clean-up that itself awaits (a sandbox's removal)
            self.cleaned = True


async def test_until_stopped_returns_the_result_without_an_abort():
    work = Work(0.05)
    assert await trainer_abort.until_stopped(work(), lambda: None) == "done"
    assert await trainer_abort.until_stopped(Work(0.01)(), None) == "done"


async def test_an_abort_cancels_the_work_and_waits_for_its_clean_up():
    flag: list[str] = []
    work = Work(60)
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, flag.append, "stop")
    with pytest.raises(RolloutAborted, match="why"):
        await trainer_abort.until_stopped(work(), lambda: "why" if flag else None)
    assert work.started and work.cancelled and work.cleaned  # cut short, cleaned up first


async def test_an_abort_already_set_starts_nothing_and_cancellation_cleans_up():
    work = Work(60)
    with pytest.raises(RolloutAborted):
        await trainer_abort.until_stopped(work(), lambda: "over")
    assert not work.started
    work = Work(60)
    task = asyncio.ensure_future(trainer_abort.until_stopped(work(), lambda: None))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert work.cleaned  # by the time the cancellation completed


def test_the_flag_is_slimes_generate_state(monkeypatch, tmp_path):
    from coding_agent_rl.tokenizer import build_qwen3_tokenizer

    args = slime_args(hf_checkpoint=str(build_qwen3_tokenizer(tmp_path / "tok")))
    state = fresh_state(args)
    check = trainer_abort.slime_abort_flag(args)
    assert check is not None and check() is None
    state.aborted = True
    assert check() == trainer_abort.REASON
    state.reset()
    assert check() is None
    # slime's rollout module not loaded (another rollout function, or no slime): no flag, and
    # nothing imported
    monkeypatch.delitem(sys.modules, trainer_abort.SLIME_ROLLOUT)
    assert trainer_abort.slime_abort_flag(args) is None
    assert trainer_abort.SLIME_ROLLOUT not in sys.modules


async def test_generate_boots_nothing_once_slime_aborted(monkeypatch, tmp_path):
    """slime set the flag after handing us the sample: no runtime, no sandbox, an ABORTED
    placeholder whose record says why."""
    from coding_agent_rl.tokenizer import build_qwen3_tokenizer

    for name in ("_runtime", "_runtime_lock", "_writer"):
        monkeypatch.setattr(gen, name, None)
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(EXAMPLES))
    args = slime_args(hf_checkpoint=str(build_qwen3_tokenizer(tmp_path / "tok")))
    state = fresh_state(args)
    state.aborted = True
    line = dataset_lines()["pager"]
    sample = slime().Sample(
        index=3, prompt=line["prompt"], metadata=json.loads(json.dumps(line["metadata"]))
    )
    try:
        (p,) = await gen.generate(args, sample, {})
    finally:
        state.reset()
    assert gen._runtime is None
    assert p.status is slime().Sample.Status.ABORTED and p.remove_sample is True
    assert p.metadata["failure_kind"] == "aborted"
    assert p.metadata["rollout_record"]["abort_reason"] == trainer_abort.REASON
