"""What slime's own code (vendored, unmodified: ``tests/support/slime_vendor.py``) reads from our
samples: status identity (members of the caller's ``Sample.Status``), the placeholders' path
through ``generate_and_rm`` / ``generate_and_rm_group``, the reward hook called the way slime
calls it (batched, ``--group-rm``), the dynamic filters and the fully-async requeue on our
groups, the options we refuse, the field conversions, and ``post_process_rewards`` through
slime's ``_convert_samples_to_train_data``. No Docker: real rollouts are in
``test_slime_fidelity.py``."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import enum
import io
import json
import math

import pytest
from support.rollout_helpers import EXAMPLES, dataset_lines
from support.slime_path import REWARD_CALLS
from support.slime_vendor import fresh_state, slime, slime_args, trainer

from coding_agent_rl import filters
from coding_agent_rl import generate as gen
from coding_agent_rl import types as car_types
from coding_agent_rl.siblings import Siblings
from coding_agent_rl.trajectory import assign_reward
from coding_agent_rl.types import Sample as OurSample
from coding_agent_rl.types import Status, aborted_sample, from_caller, to_caller

GENERATE = "coding_agent_rl.generate.generate"
SlimeSample = slime().Sample


def args_for(**overrides):
    """slime's args (its parser's defaults) with these tests' launch flags."""
    base = {
        "custom_generate_function_path": GENERATE,
        "custom_rm_path": "support.slime_path.recorded_reward",
        "custom_reward_post_process_path": "coding_agent_rl.generate.post_process_rewards",
        "sglang_server_concurrency": 4,
        "rewards_normalization": True,
        "grpo_std_normalization": False,
        "n_samples_per_prompt": 2,
        "rollout_batch_size": 2,
        "hf_checkpoint": "/nonexistent/tokenizer",
        "sglang_router_ip": "127.0.0.1",
        "sglang_router_port": 9,
    }
    return slime_args(**{**base, **overrides})


def line_sample(name: str, index: int, **changes) -> SlimeSample:
    line = dataset_lines()[name]
    s = SlimeSample(
        group_index=index,
        index=index,
        prompt=line["prompt"],
        label=line["label"],
        metadata=json.loads(json.dumps(line["metadata"])),
    )
    return dataclasses.replace(s, **changes)


def failing_group() -> list:
    """Two samples whose rollouts fail before any sandbox: a task data error and, with the
    tokenizer directory missing, the runtime's start (infra)."""
    no_image = line_sample("money", 0)
    del no_image.metadata["image"]
    return [no_image, line_sample("pager", 1)]


@pytest.fixture
def fresh_runtime(monkeypatch, tokenizer_dir):
    monkeypatch.setattr(gen, "_runtime", None)
    monkeypatch.setattr(gen, "_runtime_lock", None)
    monkeypatch.setattr(gen, "_writer", None)
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(EXAMPLES))  # slime reads the JSONL
    REWARD_CALLS.clear()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """slime's GenerateState loads a real tokenizer from ``hf_checkpoint``."""
    from coding_agent_rl.tokenizer import build_qwen3_tokenizer

    return str(build_qwen3_tokenizer(tmp_path_factory.mktemp("qwen3")))


def state_for(args, tokenizer_dir):
    """slime's per-process state, built from a real tokenizer (``args`` may name a missing one:
    the state is made once, before generate sees ``args``)."""
    return fresh_state(args, state_checkpoint=tokenizer_dir)


# ---- status identity ------------------------------------------------------------------------------


@pytest.mark.parametrize("defence", ["on", "off"])
async def test_placeholders_are_aborted_in_slimes_eyes(
    fresh_runtime, monkeypatch, defence, tokenizer_dir
):
    """What slime does with a failed rollout depends on ``status == Sample.Status.ABORTED``
    (``generate_and_rm`` returns such a list unscored; partial rollouts, filters and the trainer's
    truncation flags compare members the same way). With our own enum (the defence off) slime
    never sees the abort and takes the list down the reward-model path; with the caller's
    members it does."""
    if defence == "off":
        monkeypatch.setattr(car_types, "status_enum", lambda cls: Status)
    args = args_for()
    state_for(args, tokenizer_dir)
    group = failing_group()
    no_image = group[0]
    out = await slime().sglang_rollout.generate_and_rm_group(args, group, {})
    for result, kind in zip(out, ("data", "infra"), strict=True):
        (p,) = result
        assert type(p) is SlimeSample and p.metadata["failure_kind"] == kind
        assert p.remove_sample is True and p.status.value == "aborted"
    if defence == "off":
        # slime took the failures for finished rollouts: its batched reward call (an empty
        # list: every sample already has its reward)
        assert REWARD_CALLS == [[], []]
        assert all(p.status != SlimeSample.Status.ABORTED for (p,) in out)
        return
    assert REWARD_CALLS == []
    assert all(p.status is SlimeSample.Status.ABORTED for (p,) in out)
    slime().ray_rollout.validate_rollout_id_annotated([out])
    flat = [s for result in out for s in result]
    data = trainer(args)._convert_samples_to_train_data(flat)
    assert data["loss_masks"] == [[0], [0]] and data["rewards"] == [0.0, 0.0]
    assert no_image.status is SlimeSample.Status.PENDING  # the caller's object is untouched


@pytest.mark.parametrize("defence", ["on", "off"])
def test_truncation_reaches_the_trainers_flags(monkeypatch, defence):
    """A sample cut by a budget must be flagged ``truncated`` in slime's training data."""
    if defence == "off":
        monkeypatch.setattr(car_types, "status_enum", lambda cls: Status)
    cut = OurSample(
        index=1, rollout_id=1, tokens=[1, 2, 3], response_length=2, loss_mask=[1, 1],
        rollout_log_probs=[-0.1, -0.2], reward=0.0, status=Status.TRUNCATED,
    )  # fmt: skip
    data = trainer(args_for())._convert_samples_to_train_data([to_caller(cut, SlimeSample())])
    assert data["truncated"] == ([1] if defence == "on" else [0])


def test_every_status_converts_to_the_callers_member():
    template = SlimeSample(
        index=3,
        multimodal_train_inputs={"pixel_values": [1]},
        train_metadata={"loss": "x"},
        teacher_log_probs=[-0.5],
    )
    for status in Status:
        ours = dataclasses.replace(from_caller(template), status=status, reward=1, remove_sample=0)
        back = to_caller(ours, template)
        assert type(back) is SlimeSample
        assert back.status is SlimeSample.Status(status.value)
        assert back.reward == 1.0 and type(back.reward) is float
        assert back.remove_sample is False
        assert back.multimodal_train_inputs == {"pixel_values": [1]}
        assert back.train_metadata == {"loss": "x"} and back.teacher_log_probs == [-0.5]
    # Our own class round-trips to itself (Sample.Status is our Status).
    assert to_caller(OurSample(status=Status.TRUNCATED), OurSample()).status is Status.TRUNCATED


def test_fields_the_callers_class_lacks_are_set_as_attributes():
    @dataclasses.dataclass
    class Older:  # a Sample class from before rollout_id existed
        index: int | None = None
        tokens: list[int] = dataclasses.field(default_factory=list)
        Status = SlimeSample.Status
        status: SlimeSample.Status = SlimeSample.Status.PENDING
        remove_sample: bool = False
        metadata: dict = dataclasses.field(default_factory=dict)

    p = aborted_sample(Older(index=5), "why")
    assert type(p) is Older and p.status is Older.Status.ABORTED and p.rollout_id == 5

    class NoAborted(SlimeSample):
        class Status(enum.Enum):
            PENDING = "pending"

    with pytest.raises(TypeError, match="no member with the value"):
        aborted_sample(NoAborted(), "why")


# ---- post_process_rewards ---------------------------------------------------------------------------


def rollout(group: int, rid: int, reward: float, k: int, mode: str = "full") -> list:
    """K slime samples of one rollout, rewarded as generate() rewards them."""
    ours = [OurSample(group_index=group, index=rid, rollout_id=rid) for _ in range(k)]
    assign_reward(ours, reward, mode)
    return [to_caller(s, SlimeSample()) for s in ours]


def issue_example(mode: str = "full") -> list:
    a, b = rollout(0, 10, 1.0, 3, mode), rollout(0, 11, 0.0, 1, mode)
    c, d = rollout(1, 12, 1.0, 1, mode), rollout(1, 13, 1.0, 2, mode)
    return [*a, *b, *c, *d]


def test_post_process_rewards_gives_the_issue_example():
    samples = issue_example()
    args = args_for()
    raw, rewards = gen.post_process_rewards(args, samples)
    assert raw == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert rewards == [0.5, 0.5, 0.5, -0.5, 0.0, 0.0, 0.0]
    # slime's default sees 7 samples, not 2 x 2: one batch-wide row, each sibling a rollout.
    _, default = trainer(args_for(custom_reward_post_process_path=None))._post_process_rewards(
        samples
    )
    assert default == pytest.approx([1 - 6 / 7] * 3 + [-6 / 7] + [1 - 6 / 7] * 3)
    # Through the trainer's conversion, unchanged and in order.
    data = trainer(args)._convert_samples_to_train_data(samples)
    assert data["rewards"] == rewards and data["rollout_ids"] == [10, 10, 10, 11, 12, 13, 13]


def test_post_process_rewards_split_std_and_dropped_rollouts():
    split = issue_example("split")
    _, rewards = gen.post_process_rewards(args_for(), split)
    assert rewards == pytest.approx([0.5 / 3] * 3 + [-0.5, 0.0, 0.0, 0.0])
    _, scaled = gen.post_process_rewards(args_for(grpo_std_normalization=True), issue_example())
    z = 0.5 / (math.sqrt(0.5) + 1e-6)  # sample std of {1, 0} is sqrt(1/2)
    assert scaled == pytest.approx([z] * 3 + [-z, 0.0, 0.0, 0.0])
    # An aborted rollout (and a removed one) in group 0 changes nothing for the others.
    aborted = to_caller(aborted_sample(OurSample(group_index=0, index=14), "x"), SlimeSample())
    removed = rollout(0, 15, 1.0, 1)[0]
    removed.remove_sample = True
    samples = [*issue_example(), aborted, removed]
    raw, rewards = gen.post_process_rewards(args_for(), samples)
    assert rewards == [0.5, 0.5, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert raw[-2:] == [0.0, 1.0]


def test_post_process_rewards_without_normalisation_and_bad_input():
    samples = issue_example("split")
    raw, rewards = gen.post_process_rewards(args_for(advantage_estimator="ppo"), samples)
    assert rewards == raw == pytest.approx([1 / 3] * 3 + [0.0, 1.0, 0.5, 0.5])
    named = rollout(0, 1, 0.0, 1) + rollout(0, 2, 0.0, 1)
    named[0].reward, named[1].reward = {"acc": 1.0}, {"acc": 0.0}
    for s in named:
        s.metadata.pop("rollout_reward")
    raw, rewards = gen.post_process_rewards(args_for(reward_key="acc"), named)
    assert (raw, rewards) == ([1.0, 0.0], [0.5, -0.5])
    with pytest.raises(ValueError, match=r"needs args\.reward_key"):
        gen.post_process_rewards(args_for(), named)
    with pytest.raises(TypeError, match="flattened"):
        gen.post_process_rewards(args_for(), [samples])
    unscored = rollout(0, 3, 0.0, 1)
    unscored[0].reward = None
    unscored[0].metadata["rollout_reward"] = None
    with pytest.raises(ValueError, match="has no reward"):
        gen.post_process_rewards(args_for(), unscored)
    clash = rollout(0, 4, 1.0, 1) + rollout(0, 4, 0.0, 1)
    with pytest.raises(ValueError, match="two rollout rewards"):
        gen.post_process_rewards(args_for(), clash)


def test_trainer_rejects_fanned_out_siblings_without_one_rollout_id():
    validate = slime().ray_rollout.validate_rollout_id_annotated
    siblings = rollout(0, 1, 1.0, 2)
    validate([[siblings]])
    siblings[1].rollout_id = 2
    with pytest.raises(AssertionError, match="must share rollout_id"):
        validate([[siblings]])
    siblings[0].rollout_id = siblings[1].rollout_id = None
    with pytest.raises(AssertionError, match="rollout_id is unset"):
        validate([[siblings]])


def test_generates_artifact_writer_appends_and_holds_nothing(tmp_path):
    """Under a trainer, results.jsonl is appended to (earlier lines kept), no samples file is
    written, nothing accumulates in memory, and metrics.prom counts from running totals."""
    from coding_agent_rl.rollout.outputs import RunWriter

    (tmp_path / "results.jsonl").write_text(json.dumps({"instance_id": "old"}) + "\n")
    writer = RunWriter(tmp_path, append=True, samples=False)
    for i, reward in enumerate((1.0, 0.0, 1.0)):
        writer.add([OurSample()], {"instance_id": f"t{i}", "reward": reward, "failure_kind": None})
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["instance_id"] for x in lines] == ["old", "t0", "t1", "t2"]
    assert writer.results == [] and not (tmp_path / "samples.jsonl").exists()
    metrics = (tmp_path / "metrics.prom").read_text()
    assert 'outcome="solved"} 2' in metrics and 'outcome="unsolved"} 1' in metrics
    assert "coding_agent_rl_reward_sum 2.0" in metrics
    writer.close({})


# ---- slime's group-level code on our results ------------------------------------------------------


async def test_reward_hook_takes_slimes_batched_calls(fresh_runtime, tokenizer_dir):
    """slime calls the hook batched for a list result (``rm_hub.batched_async_rm``), even with
    an empty list; per sample through ``async_rm``; under ``--group-rm`` with the group, whose
    items are our rollouts (lists of siblings). Each worth its rollout's undivided reward."""
    rm = slime().rm_hub
    args = args_for(custom_rm_path="coding_agent_rl.generate.reward")
    assert await rm.batched_async_rm(args, []) == []
    # without a hook (--custom-rm-path unset) slime's batched call for our results is empty too
    assert await rm.batched_async_rm(args_for(custom_rm_path=None), []) == []
    split = rollout(0, 10, 1.0, 3, "split")
    assert await rm.batched_async_rm(args, split) == [1.0, 1.0, 1.0]
    assert await rm.async_rm(args, split[0]) == 1.0
    got = await rm.batched_async_rm(args, [Siblings(split), rollout(0, 11, 0.0, 1), []])
    assert got == [1.0, 0.0, 0.0]
    # --group-rm through slime's generate_and_rm_group: the hook gets the group, slime sets
    # each item's reward.
    args = args_for(group_rm=True)
    state_for(args, tokenizer_dir)
    out = await slime().sglang_rollout.generate_and_rm_group(args, failing_group(), {})
    assert [out] == REWARD_CALLS and all(isinstance(item, Siblings) for item in out)
    assert [item.reward for item in out] == [0.0, 0.0]


def test_dynamic_filters_see_one_reward_per_rollout():
    """slime's ``check_reward_nonzero_std`` reads ``get_reward_value`` of each group item: our
    items answer with the rollout's reward. Our filters also take plain lists of siblings
    (e.g. after ``--rollout-sample-hook-path``, which rebuilds lists), where slime's crashes."""
    s = slime()
    args = args_for()
    mixed = [Siblings(rollout(0, 10, 1.0, 3, "split")), Siblings(rollout(0, 11, 0.0, 1))]
    same = [Siblings(rollout(0, 12, 1.0, 2, "split")), Siblings(rollout(0, 13, 1.0, 1))]
    assert bool(s.filters.check_reward_nonzero_std(args, mixed).keep) is True
    assert bool(s.filters.check_reward_nonzero_std(args, same).keep) is False
    for group, keep in ((mixed, True), (same, False)):
        out = filters.check_reward_nonzero_std(args, group)
        assert out.keep is keep and out.reason == (None if keep else "zero_std_1.0")
        assert filters.check_reward_nonzero_std(args, [list(g) for g in group]).keep is keep
    assert filters.check_reward_nonzero_std_with_fallback(args, same).keep_when_insufficient
    with pytest.raises(AttributeError, match="get_reward_value"):
        s.filters.check_reward_nonzero_std(args, [list(g) for g in mixed])


async def test_fully_async_requeues_our_aborted_groups(fresh_runtime, tokenizer_dir):
    """slime's fully-async worker requeues a group with an ABORTED item instead of shipping it
    to training (``any(s.status == ABORTED for s in group)``)."""
    s = slime()
    args = args_for()
    state_for(args, tokenizer_dir)
    buffer = s.data_source.RolloutDataSourceWithBuffer.__new__(
        s.data_source.RolloutDataSourceWithBuffer
    )
    buffer.args, buffer.buffer = args, []
    worker = s.fully_async.AsyncRolloutWorker(args, buffer, concurrency=1)
    task = asyncio.ensure_future(s.sglang_rollout.generate_and_rm_group(args, failing_group(), {}))
    await task
    worker._make_done_cb(0)(task)
    assert buffer.buffer == [task.result()] and worker.queue_size() == 0


async def test_partial_rollout_abort_collects_and_restarts_our_groups(fresh_runtime, tokenizer_dir):
    """``--partial-rollout``: slime's own ``abort()`` reads ``response`` / ``metadata`` of each
    group item it collects and requeues the group; the requeued items come back to ``generate``,
    which restarts each rollout from its dataset sample."""
    from coding_agent_rl.policy.scripted import ScriptedPolicy
    from coding_agent_rl.policy.server import PolicyServer

    s = slime()
    server = PolicyServer(ScriptedPolicy({"steps": []}), tokenizer_dir)
    url = await server.start("127.0.0.1", 0)
    try:
        args = args_for(partial_rollout=True, sglang_router_port=int(url.rsplit(":", 1)[1]))
        state = state_for(args, tokenizer_dir)
        group = failing_group()
        del group[1].metadata["image"]  # with a policy server up, no rollout may start here
        state.submit_generate_tasks([group])
        await asyncio.wait(state.pendings)  # the rollouts ended (here: at once) before the abort
        collected = await s.sglang_rollout.abort(args, rollout_id=7)
        state.reset()
    finally:
        await server.stop()
    (group,) = collected
    assert [item.status for item in group] == [SlimeSample.Status.ABORTED] * 2
    buffer = s.data_source.RolloutDataSourceWithBuffer.__new__(
        s.data_source.RolloutDataSourceWithBuffer
    )
    buffer.args, buffer.buffer = args, []
    buffer.add_samples(collected)
    # The next step: slime hands each requeued item back to generate_and_rm.
    again = await s.sglang_rollout.generate_and_rm_group(args, buffer.buffer[0], {})
    assert [r[0].metadata["failure_kind"] for r in again] == ["data", "data"]
    assert all(r.origin is item.origin for r, item in zip(again, group, strict=True))


@pytest.mark.parametrize("defence", ["on", "off"])
async def test_top_p_and_routing_replay_are_refused_at_the_start(
    fresh_runtime, monkeypatch, tokenizer_dir, defence
):
    """slime's trainer needs SGLang's per-token top-p replay data with ``--rollout-top-p`` < 1
    (``_convert_samples_to_train_data`` asserts it on every sample) and the routed experts with
    routing replay. We do not record them, so ``generate`` refuses before any rollout; without
    the refusal the whole rollout step runs and then the trainer asserts."""
    if defence == "off":
        monkeypatch.setattr(gen, "check_options", lambda args: None)
    s = slime()
    for flags in ({"rollout_top_p": 0.9}, {"use_rollout_routing_replay": True}):
        args = args_for(**flags)
        state_for(args, tokenizer_dir)
        if defence == "on":
            with pytest.raises(gen.UnsupportedOption) as e:
                await s.sglang_rollout.generate_and_rm_group(args, failing_group(), {})
            assert "\n" not in str(e.value) and str(e.value).startswith("--")
            continue
        out = await s.sglang_rollout.generate_and_rm_group(args, failing_group(), {})
        flat = [x for item in out for x in item]
        if "rollout_top_p" in flags:
            with pytest.raises(AssertionError):
                trainer(args)._convert_samples_to_train_data(flat)
        else:  # nothing for the trainer's replay to use
            assert "rollout_routed_experts" not in trainer(args)._convert_samples_to_train_data(
                flat
            )


def test_siblings_get_their_own_mutable_fields_and_pil_images():
    """slime's ``Sample`` holds ``spec_info`` / ``prefix_cache_info`` objects that slime mutates
    per sample: siblings made from one template must not share them. Images reach slime's
    ``multimodal_inputs`` as PIL images (its engine encoder reads ``image.mode``)."""
    from support.vision_helpers import png

    url = "data:image/png;base64," + base64.b64encode(png(8, 6)).decode()
    template = SlimeSample(index=1)
    a, b = (
        to_caller(OurSample(index=1, multimodal_inputs={"images": [url]}), template)
        for _ in range(2)
    )
    assert a.spec_info is not b.spec_info and a.spec_info is not template.spec_info
    assert a.prefix_cache_info is not b.prefix_cache_info
    a.spec_info.spec_verify_ct += 1
    assert b.spec_info.spec_verify_ct == template.spec_info.spec_verify_ct == 0
    (image,) = a.multimodal_inputs["images"]
    assert image.size == (8, 6)
    encoded = s_encode(image)
    assert encoded.startswith("data:image/png;base64,")
    from PIL import Image

    assert Image.open(io.BytesIO(base64.b64decode(encoded.split(",", 1)[1]))).size == (8, 6)
    # Our own class keeps the data URL (our JSON form).
    assert to_caller(OurSample(multimodal_inputs={"images": [url]}), OurSample()).multimodal_inputs
    assert from_caller(a).multimodal_inputs["images"][0] is image


def s_encode(image):
    from slime.utils.processing_utils import encode_image_for_rollout_engine

    return encode_image_for_rollout_engine(image)


def test_build_env_falls_back_to_positional_arguments():
    """slime's multi-turn example calls ``build_env(sample=..., args=...)`` and, on TypeError,
    ``build_env(sample, args)``: an env module with other parameter names still loads."""
    import types as pytypes

    from coding_agent_rl.env.slime_config import build_env

    made = []
    module = pytypes.SimpleNamespace(build_env=lambda s, a: made.append((s, a)) or "env")
    assert build_env(module, "sample", "args") == "env" and made == [("sample", "args")]

    def broken(sample=None, args=None):
        raise TypeError("inside build_env")

    with pytest.raises(TypeError, match="inside build_env"):
        build_env(pytypes.SimpleNamespace(build_env=broken), "s", "a")


def test_siblings_survive_copies_and_pickling():
    """slime deep-copies and (through Ray) pickles what it holds: a group item stays a
    ``Siblings`` with its origin, its samples and what it answers."""
    import copy
    import pickle

    item = Siblings(rollout(0, 10, 1.0, 2, "split"), origin=SlimeSample(index=10))
    for other in (copy.deepcopy(item), pickle.loads(pickle.dumps(item)), copy.copy(item)):
        assert type(other) is Siblings and other == item and other.origin.index == 10
        assert other.reward == 1.0 and other.status is item.status is item[-1].status
    assert [s.reward for s in item] == [0.5, 0.5]  # split: each sibling half, the item whole
    with pytest.raises(AttributeError):
        _ = Siblings().response  # an empty item answers nothing


def test_slimes_rollout_function_to_train_data(fresh_runtime, tokenizer_dir, tmp_path):
    """slime's whole rollout side, as its ``RolloutManager`` runs it: its data source reads the
    JSONL, its synchronous ``generate_rollout`` (its own event-loop thread) runs our generate
    per sample, ends the step with its ``abort()``, and ``_get_rollout_data`` /
    ``_convert_samples_to_train_data`` turn the groups into train data through our reward
    post-process hook. Rows without an image: every rollout a placeholder, no Docker."""
    from slime.utils.async_utils import run

    from coding_agent_rl.policy.scripted import ScriptedPolicy
    from coding_agent_rl.policy.server import PolicyServer

    s = slime()
    data = tmp_path / "rows.jsonl"
    with data.open("w") as f:
        for name in ("money", "pager"):
            line = json.loads(json.dumps(dataset_lines()[name]))
            del line["metadata"]["image"]
            f.write(json.dumps(line) + "\n")
    server = PolicyServer(ScriptedPolicy({"steps": []}), tokenizer_dir)
    url = run(server.start("127.0.0.1", 0))  # on slime's loop, where abort() will call it
    try:
        args = args_for(
            hf_checkpoint=tokenizer_dir,
            prompt_data=str(data),
            input_key="prompt",
            label_key="label",
            metadata_key="metadata",
            rollout_global_dataset=True,
            over_sampling_batch_size=2,
            sglang_router_port=int(url.rsplit(":", 1)[1]),
        )
        fresh_state(args)
        manager = trainer(args)
        manager.generate_rollout = s.sglang_rollout.generate_rollout
        manager.data_source = s.data_source.RolloutDataSourceWithBuffer(args)
        flat, _ = manager._get_rollout_data(rollout_id=0)
        train = manager._convert_samples_to_train_data(flat)
    finally:
        run(server.stop())
    assert len(flat) == 4 and all(type(x) is SlimeSample for x in flat)
    assert all(x.status is SlimeSample.Status.ABORTED for x in flat)
    assert {x.metadata["failure_kind"] for x in flat} == {"data"}
    assert train["loss_masks"] == [[0]] * 4 and train["rewards"] == [0.0] * 4
    assert train["rollout_ids"] == [x.index for x in flat]
    assert REWARD_CALLS == []  # placeholders are never scored
