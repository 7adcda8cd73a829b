"""The native loop driven through slime's call path (slime's own code, vendored: tests/support/slime_vendor.py, through slime_path.py): a slime-style
``args`` namespace (``--custom-generate-function-path coding_agent_rl.generate_native.generate``,
``rollout_interaction_env_path`` as a file path or a module, ``--custom-config-path`` YAML), a
``Sample`` class with slime's plain nested ``Status`` enum, ``generate_and_rm``'s branches, and
the conversion to training data. The policy is the real CPU server over HTTP."""

from __future__ import annotations

import types
import uuid

import pytest
from support.calc_env import TOOLS
from support.slime_path import (
    RM_CALLS,
    SlimeSample,
    generate_and_rm,
    train_data,
    with_slime_defaults,
)
from support.slime_vendor import fresh_state
from support.vision_helpers import png

from coding_agent_rl import generate_native
from coding_agent_rl.env import slime_config
from coding_agent_rl.tokenizer import qwen3_tokenizer_dir

CALC_ENV = str(__import__("pathlib").Path(__file__).parents[1].joinpath("support", "calc_env.py"))
MESSAGES = [{"role": "user", "content": "What is 2 + 3? Use the tools, then answer."}]
SAMPLING = {"temperature": 1.0, "max_new_tokens": 512}
SOLVE = {
    "steps": [
        {"tool": {"name": "add", "arguments": {"a": 2, "b": 3}}},
        {"tool": {"name": "answer", "arguments": {"value": 5}}},
    ]
}


def slime_args(url: str, tmp_path, **overrides) -> types.SimpleNamespace:
    config = tmp_path / "native.yaml"
    config.write_text("max_turns: 6\nmax_env_retries_per_turn: 2\nenv_retry_backoff_s: 0.01\n")
    base = {
        "hf_checkpoint": str(qwen3_tokenizer_dir()),
        "sglang_router_ip": "127.0.0.1",
        "sglang_router_port": int(url.rsplit(":", 1)[1]),
        "rollout_max_context_len": 4096,
        "rollout_max_response_len": 2048,
        "sglang_tool_call_parser": "qwen25",
        "sglang_reasoning_parser": "qwen3",
        "custom_generate_function_path": "coding_agent_rl.generate_native.generate",
        "custom_rm_path": "support.slime_path.calc_reward",
        "rollout_interaction_env_path": CALC_ENV,
        "custom_config_path": str(config),
        "apply_chat_template_kwargs": None,
    }
    return types.SimpleNamespace(**{**base, **overrides})


def calc_sample(index: int, prompt=None, **knobs) -> SlimeSample:
    """What slime builds from a dataset line, with a session id per sample."""
    return SlimeSample(
        group_index=index,
        index=index,
        prompt=MESSAGES if prompt is None else prompt,
        label=5,
        metadata={"tools": TOOLS, "calc": knobs},
        session_id=uuid.uuid4().hex,
    )


@pytest.fixture
async def served(scripted_engine, fresh_env_generate):
    client, _ = await scripted_engine(SOLVE)
    return client.base_url


@pytest.mark.parametrize("templated", [False, True], ids=["messages", "templated-text"])
async def test_completed_sample_through_generate_and_rm(served, tmp_path, tokenizer, templated):
    args = slime_args(served, tmp_path)
    prompt = (
        tokenizer.apply_chat_template(
            MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True
        )
        if templated
        else None
    )
    sample = calc_sample(0, prompt)
    RM_CALLS.clear()
    out = await generate_and_rm(args, sample, dict(SAMPLING))
    assert out is sample and out.status is SlimeSample.Status.COMPLETED  # slime's own member
    assert out.reward == 1.0 and [out] == RM_CALLS  # no env reward: slime's RM scored it
    assert out.weight_versions == ["0", "0"] and len(out.metadata["turns"]) == 2
    data = train_data([out])
    assert data["truncated"] == [0] and sum(data["loss_masks"][0]) > 0
    assert out.tokens[: len(out.tokens) - out.response_length] == tokenizer.apply_chat_template(
        MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )


async def test_yaml_settings_on_args_win_and_truncation_is_slimes_member(served, tmp_path):
    args = slime_args(served, tmp_path, max_turns=1, rollout_max_context_len=None)
    out = await generate_and_rm(args, calc_sample(1), dict(SAMPLING))
    assert out.status is SlimeSample.Status.COMPLETED and out.metadata["end_reason"] == "max_turns"
    args = slime_args(served, tmp_path, rollout_max_context_len=260)
    out = await generate_and_rm(args, calc_sample(2), dict(SAMPLING))
    assert out.status is SlimeSample.Status.TRUNCATED and len(out.tokens) <= 260
    assert train_data([out])["truncated"] == [1]


async def test_an_env_failure_returns_slimes_aborted_placeholder(served, tmp_path):
    args = slime_args(served, tmp_path)
    RM_CALLS.clear()
    built = slime_config.load_env_module(CALC_ENV).BUILT  # the module slime's path loaded
    built.clear()
    out = await generate_and_rm(args, calc_sample(3, fail="always"), dict(SAMPLING))
    assert out.status is SlimeSample.Status.ABORTED and out.remove_sample
    assert out.tokens == [0, 0] and out.loss_mask == [0] and RM_CALLS == []
    assert (
        out.metadata["failure_kind"] == "infra" and "failed 3 times" in out.metadata["abort_reason"]
    )
    assert built[-1].closed and built[-1].attempts[0] == 3  # 1 + max_env_retries_per_turn (YAML)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"rollout_interaction_env_path": "/nowhere/env.py"}, "no such file"),
        ({"rollout_interaction_env_path": "json"}, "no build_env"),
        ({"custom_config_path": None}, "max_turns"),
    ],
)
async def test_misconfiguration_is_one_clear_line_per_sample(served, tmp_path, change, words):
    args = slime_args(served, tmp_path, **change)
    out = await generate_native.generate(args, calc_sample(4), dict(SAMPLING))
    assert out.status is SlimeSample.Status.ABORTED and words in out.metadata["abort_reason"]


async def test_vlm_checkpoint_images_reach_slimes_sample(
    scripted_engine, fresh_env_generate, tmp_path, tiny_vlm_dir, vision
):
    """Images through slime's path: ``hf_checkpoint`` is a VLM (it has an image processor), the
    env's observations carry plots; slime's own Sample comes back with ``multimodal_inputs`` and
    ``multimodal_train_inputs`` (the processor's tensors for the images its tokens hold), and the
    engine (a VLM stand-in that pairs ``image_data`` with the image-token runs) got them."""
    client, server = await scripted_engine(SOLVE)
    server.vision = vision
    args = slime_args(client.base_url, tmp_path, hf_checkpoint=str(tiny_vlm_dir))
    sample = calc_sample(0, png=True)
    # slime's GenerateState would load the VLM's AutoProcessor, whose video processor needs
    # torchvision (not installed here); the state takes the text tokenizer, generate() the VLM.
    text = str(qwen3_tokenizer_dir())
    out = await generate_and_rm(args, sample, dict(SAMPLING), state_checkpoint=text)
    assert isinstance(out, SlimeSample) and out.status == SlimeSample.Status.COMPLETED, out.metadata
    assert len(out.multimodal_inputs["images"]) == 1  # one observation before the answer
    (item,) = vision.process_bytes([png(28, 28)])
    assert vision.runs(out.tokens) == [item.tokens]
    assert out.multimodal_train_inputs["pixel_values"].equal(item.train["pixel_values"])
    assert [len(r["image_data"]) for r in server.requests] == [0, 1]
    train_data([out])


async def test_slimes_abort_flag_ends_the_episode(served, tmp_path):
    """slime set ``GenerateState.aborted`` (the step is over): the episode is not run on, the
    sample comes back as slime's aborted placeholder."""
    args = with_slime_defaults(slime_args(served, tmp_path))
    state = fresh_state(args)
    state.aborted = True
    try:
        out = await generate_native.generate(args, calc_sample(9), dict(SAMPLING))
    finally:
        state.reset()
    assert out.status is SlimeSample.Status.ABORTED and out.remove_sample
    assert out.metadata["failure_kind"] == "aborted" and "aborted" in out.metadata["abort_reason"]


def test_a_slime_process_exits_with_its_client_sessions_closed(tmp_path):
    """slime's loop runs in a daemon thread and nobody stops our runtime: its HTTP client
    sessions are closed at exit (before, aiohttp warned 'Unclosed client session')."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[1] / "support" / "slime_exit_script.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "native.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "STATUS COMPLETED 2" in proc.stdout, proc.stdout
    assert "Unclosed" not in proc.stderr, proc.stderr[-3000:]
