"""What slime's own code reads from our samples, through the slime stand-in (``tests/support/slime_stand_in.py``):
status identity (members of the caller's ``Sample.Status``), the placeholders' path through
``generate_and_rm``, the field conversions, and ``post_process_rewards`` against slime's default
reward normalisation. No Docker: the real rollouts are in ``test_slime_fidelity.py``."""

from __future__ import annotations

import dataclasses
import json
import math
import types

import pytest
from support import slime_stand_in as slime
from support.rollout_helpers import EXAMPLES, dataset_lines

from coding_agent_rl import generate as gen
from coding_agent_rl import types as car_types
from coding_agent_rl.trajectory import assign_reward
from coding_agent_rl.types import Sample as OurSample
from coding_agent_rl.types import Status, aborted_sample, from_caller, to_caller

GENERATE = "coding_agent_rl.generate.generate"


def slime_args(**overrides):
    base = {
        "custom_generate_function_path": GENERATE,
        "custom_rm_path": "coding_agent_rl.generate.reward",
        "custom_reward_post_process_path": "coding_agent_rl.generate.post_process_rewards",
        "sglang_server_concurrency": 4,
        "partial_rollout": False,
        "advantage_estimator": "grpo",
        "rewards_normalization": True,
        "grpo_std_normalization": False,
        "n_samples_per_prompt": 2,
        "rollout_batch_size": 2,
        "reward_key": None,
        "hf_checkpoint": "/nonexistent/tokenizer",
        "sglang_router_ip": "127.0.0.1",
        "sglang_router_port": 9,
    }
    return types.SimpleNamespace(**{**base, **overrides})


def line_sample(name: str, index: int, **changes) -> slime.Sample:
    line = dataset_lines()[name]
    s = slime.Sample(
        group_index=index,
        index=index,
        prompt=line["prompt"],
        label=line["label"],
        metadata=json.loads(json.dumps(line["metadata"])),
    )
    return dataclasses.replace(s, **changes)


@pytest.fixture
def fresh_runtime(monkeypatch):
    monkeypatch.setattr(gen, "_runtime", None)
    monkeypatch.setattr(gen, "_runtime_lock", None)
    monkeypatch.setattr(gen, "_writer", None)
    monkeypatch.setenv("CODING_AGENT_RL_DATASET_DIR", str(EXAMPLES))  # slime reads the JSONL


# ---- status identity ------------------------------------------------------------------------------


@pytest.mark.parametrize("defence", ["on", "off"])
async def test_placeholders_are_aborted_in_slimes_eyes(fresh_runtime, monkeypatch, defence):
    """What slime does with a failed rollout depends on ``status == Sample.Status.ABORTED``
    (``generate_and_rm`` returns such a list unscored; partial rollouts, filters and the trainer's
    truncation flags compare members the same way). With our own enum (the defence off) slime
    never sees the abort and takes the list down the reward-model path; with the caller's
    members it does."""
    if defence == "off":
        monkeypatch.setattr(car_types, "status_enum", lambda cls: Status)
    args = slime_args()
    state = slime.GenerateState(args)
    no_image = line_sample("money", 0)
    del no_image.metadata["image"]  # task data error: no Docker touched
    no_runtime = line_sample("pager", 1)  # the tokenizer directory does not exist: infra
    out = await slime.generate_and_rm_group(args, [no_image, no_runtime], {}, state=state)
    for result, kind in zip(out, ("data", "infra"), strict=True):
        (p,) = result
        assert type(p) is slime.Sample and p.metadata["failure_kind"] == kind
        assert p.remove_sample is True and p.status.value == "aborted"
    if defence == "off":
        assert state.unscored == []  # slime took the failures for finished rollouts
        assert all(p.status != slime.Sample.Status.ABORTED for (p,) in out)
        return
    assert state.unscored == out and state.rm_calls == []
    assert all(p.status is slime.Sample.Status.ABORTED for (p,) in out)
    slime.validate_rollout_ids([out])
    data = slime.convert_samples_to_train_data(args, slime.flatten([out]))
    assert data["loss_masks"] == [[0], [0]] and data["rewards"] == [0.0, 0.0]
    assert no_image.status is slime.Sample.Status.PENDING  # the caller's object is untouched


@pytest.mark.parametrize("defence", ["on", "off"])
def test_truncation_reaches_the_trainers_flags(monkeypatch, defence):
    """A sample cut by a budget must be flagged ``truncated`` in slime's training data."""
    if defence == "off":
        monkeypatch.setattr(car_types, "status_enum", lambda cls: Status)
    cut = OurSample(
        index=1, rollout_id=1, tokens=[1, 2, 3], response_length=2, loss_mask=[1, 1],
        rollout_log_probs=[-0.1, -0.2], reward=0.0, status=Status.TRUNCATED,
    )  # fmt: skip
    data = slime.convert_samples_to_train_data(slime_args(), [to_caller(cut, slime.Sample())])
    assert data["truncated"] == ([1] if defence == "on" else [0])


def test_every_status_converts_to_the_callers_member():
    template = slime.Sample(
        index=3,
        multimodal_train_inputs={"pixel_values": [1]},
        train_metadata={"loss": "x"},
        teacher_log_probs=[-0.5],
    )
    for status in Status:
        ours = dataclasses.replace(from_caller(template), status=status, reward=1, remove_sample=0)
        back = to_caller(ours, template)
        assert type(back) is slime.Sample
        assert back.status is slime.Sample.Status(status.value)
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
        Status = slime.Sample.Status
        status: slime.Sample.Status = slime.Sample.Status.PENDING
        remove_sample: bool = False
        metadata: dict = dataclasses.field(default_factory=dict)

    p = aborted_sample(Older(index=5), "why")
    assert type(p) is Older and p.status is Older.Status.ABORTED and p.rollout_id == 5

    class NoAborted(slime.Sample):
        class Status(slime.Enum):
            PENDING = "pending"

    with pytest.raises(TypeError, match="no member with the value"):
        aborted_sample(NoAborted(), "why")


# ---- post_process_rewards ---------------------------------------------------------------------------


def rollout(group: int, rid: int, reward: float, k: int, mode: str = "full") -> list:
    """K slime samples of one rollout, rewarded as generate() rewards them."""
    ours = [OurSample(group_index=group, index=rid, rollout_id=rid) for _ in range(k)]
    assign_reward(ours, reward, mode)
    return [to_caller(s, slime.Sample()) for s in ours]


def issue_example(mode: str = "full") -> list:
    a, b = rollout(0, 10, 1.0, 3, mode), rollout(0, 11, 0.0, 1, mode)
    c, d = rollout(1, 12, 1.0, 1, mode), rollout(1, 13, 1.0, 2, mode)
    return [*a, *b, *c, *d]


def test_post_process_rewards_gives_the_issue_example():
    samples = issue_example()
    args = slime_args()
    raw, rewards = gen.post_process_rewards(args, samples)
    assert raw == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert rewards == [0.5, 0.5, 0.5, -0.5, 0.0, 0.0, 0.0]
    # slime's default sees 7 samples, not 2 x 2: one batch-wide row, each sibling a rollout.
    _, default = slime.post_process_rewards(
        slime_args(custom_reward_post_process_path=None), samples
    )
    assert default == pytest.approx([1 - 6 / 7] * 3 + [-6 / 7] + [1 - 6 / 7] * 3)
    # Through the trainer's conversion, unchanged and in order.
    data = slime.convert_samples_to_train_data(args, samples)
    assert data["rewards"] == rewards and data["rollout_ids"] == [10, 10, 10, 11, 12, 13, 13]


def test_post_process_rewards_split_std_and_dropped_rollouts():
    split = issue_example("split")
    _, rewards = gen.post_process_rewards(slime_args(), split)
    assert rewards == pytest.approx([0.5 / 3] * 3 + [-0.5, 0.0, 0.0, 0.0])
    _, scaled = gen.post_process_rewards(slime_args(grpo_std_normalization=True), issue_example())
    z = 0.5 / (math.sqrt(0.5) + 1e-6)  # sample std of {1, 0} is sqrt(1/2)
    assert scaled == pytest.approx([z] * 3 + [-z, 0.0, 0.0, 0.0])
    # An aborted rollout (and a removed one) in group 0 changes nothing for the others.
    aborted = to_caller(aborted_sample(OurSample(group_index=0, index=14), "x"), slime.Sample())
    removed = rollout(0, 15, 1.0, 1)[0]
    removed.remove_sample = True
    samples = [*issue_example(), aborted, removed]
    raw, rewards = gen.post_process_rewards(slime_args(), samples)
    assert rewards == [0.5, 0.5, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert raw[-2:] == [0.0, 1.0]
    # rloo: centred, times n / (n - 1) over rollouts.
    _, rloo = gen.post_process_rewards(slime_args(advantage_estimator="rloo"), issue_example())
    assert rloo == pytest.approx([1.0] * 3 + [-1.0, 0.0, 0.0, 0.0])


def test_post_process_rewards_without_normalisation_and_bad_input():
    samples = issue_example("split")
    raw, rewards = gen.post_process_rewards(slime_args(advantage_estimator="ppo"), samples)
    assert rewards == raw == pytest.approx([1 / 3] * 3 + [0.0, 1.0, 0.5, 0.5])
    named = rollout(0, 1, 0.0, 1) + rollout(0, 2, 0.0, 1)
    named[0].reward, named[1].reward = {"acc": 1.0}, {"acc": 0.0}
    for s in named:
        s.metadata.pop("rollout_reward")
    raw, rewards = gen.post_process_rewards(slime_args(reward_key="acc"), named)
    assert (raw, rewards) == ([1.0, 0.0], [0.5, -0.5])
    with pytest.raises(ValueError, match=r"needs args\.reward_key"):
        gen.post_process_rewards(slime_args(), named)
    with pytest.raises(TypeError, match="flattened"):
        gen.post_process_rewards(slime_args(), [samples])
    unscored = rollout(0, 3, 0.0, 1)
    unscored[0].reward = None
    unscored[0].metadata["rollout_reward"] = None
    with pytest.raises(ValueError, match="has no reward"):
        gen.post_process_rewards(slime_args(), unscored)
    clash = rollout(0, 4, 1.0, 1) + rollout(0, 4, 0.0, 1)
    with pytest.raises(ValueError, match="two rollout rewards"):
        gen.post_process_rewards(slime_args(), clash)


def test_trainer_rejects_fanned_out_siblings_without_one_rollout_id():
    siblings = rollout(0, 1, 1.0, 2)
    slime.validate_rollout_ids([[siblings]])
    siblings[1].rollout_id = 2
    with pytest.raises(AssertionError, match="several rollout ids"):
        slime.validate_rollout_ids([[siblings]])
    siblings[0].rollout_id = siblings[1].rollout_id = None
    with pytest.raises(AssertionError, match="no rollout_id"):
        slime.validate_rollout_ids([[siblings]])


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
