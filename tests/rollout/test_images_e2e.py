"""Images end to end in Docker, on the bundled multimodal task (``examples/multimodal.jsonl``:
the agent must read the design legend ``docs/legend.png`` in the repository).

1. Real Claude Code 2.1.332 reads the PNG with its ``Read`` tool through our adapter (a scripted
   policy drives it, then applies the fix). The image block Claude Code puts in the tool result
   reaches the policy server's request as ``image_data``; the sample's tokens hold that image's
   placeholder expanded to exactly the Qwen2-VL processor's count; its training tensors equal the
   processor's output for that image. The policy server stands in for a VLM engine: it checks the
   runs against ``image_data`` as SGLang's Qwen-VL path pairs them (400 otherwise).
2. The tiny random-weight Qwen2-VL (``hf:`` policy, real sampling) drives the native loop on the
   same task (the legend is shown with the task): ``verify-logprobs`` recomputes the sampled
   logprobs with the image by teacher forcing and agrees.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json

import pytest
import torch
from PIL import Image
from support.rollout_helpers import EXAMPLES, RUN_ID, containers, runtime, write_script

from coding_agent_rl.cli import main
from coding_agent_rl.datasets.schema import load_dataset
from coding_agent_rl.policy.replay import patch_commands
from coding_agent_rl.types import Sample

pytestmark = [pytest.mark.docker]

MULTIMODAL = EXAMPLES / "multimodal.jsonl"
LEGEND = EXAMPLES / "chart" / "repo" / "docs" / "legend.png"


@pytest.fixture(scope="module")
def chart_row():
    from coding_agent_rl.images.dataset import build_dataset_images

    build_dataset_images(MULTIMODAL)
    (row,) = load_dataset(MULTIMODAL)
    return row


def decoded(url: str) -> bytes:
    head, _, body = url.partition(",")
    assert head.startswith("data:image/") and head.endswith(";base64"), head
    return base64.b64decode(body)


@pytest.mark.agents
async def test_claude_code_reads_a_png_into_image_data_tokens_and_tensors(
    chart_row, vision, tiny_vlm_dir, tmp_path
):
    from support.rollout_helpers import base_sample, rollout_config

    steps = [
        {"tool": {"name": "Read", "arguments": {"file_path": "/testbed/docs/legend.png"}}},
        *({"shell": c} for c in patch_commands(chart_row.patch, chart_row.workdir)),
        {"say": "The error colour now matches the legend."},
    ]
    spec = write_script(
        tmp_path / "read_png.json", [{"match_prompt": "design legend", "steps": steps}]
    )
    async with runtime(
        policy=spec, rollout=rollout_config(tmp_path / "out"), vision=str(tiny_vlm_dir)
    ) as rt:
        seen: list[list[dict]] = []  # the canonical messages of every request (wire parse)
        prepare = rt.adapter.engine.prepare

        async def recording(session, recorded, request):
            seen.append(request.messages)
            return await prepare(session, recorded, request)

        rt.adapter.engine.prepare = recording
        outcome = await rt.runner.run(chart_row, base_sample(chart_row, 0))
        requests = list(rt.policy_server.requests)
    record, samples = outcome.record, outcome.samples
    assert record["failure_kind"] is None and record["reward"] == 1.0, record
    (sample,) = samples
    sample.check()

    # What Claude Code's Read sent for the PNG, as it reached the policy server.
    with_images = [r for r in requests if r["image_data"]]
    assert with_images, [len(r["image_data"]) for r in requests]
    sent = with_images[-1]["image_data"]
    assert len(sent) == 1  # one image, re-sent with every later request
    assert all(r["image_data"] == sent for r in with_images)
    raw = decoded(sent[0])
    facts = {
        "sha_equal_file": hashlib.sha256(raw).hexdigest()
        == hashlib.sha256(LEGEND.read_bytes()).hexdigest(),
        "mime": sent[0].split(";")[0],
        "bytes": len(raw),
        "file_bytes": LEGEND.stat().st_size,
    }
    print("Claude Code Read(PNG) ->", json.dumps(facts))

    # the sample: the image's run is exactly the processor's count, the tensors its output
    items = vision.process_bytes([raw])
    assert vision.runs(sample.tokens) == [items[0].tokens] and items[0].tokens > 1
    reference = vision.image_processor(
        images=[Image.open(io.BytesIO(raw)).convert("RGB")],
        return_tensors="pt",
    )
    mm = sample.multimodal_train_inputs
    assert torch.equal(mm["pixel_values"], reference["pixel_values"])
    assert torch.equal(mm["image_grid_thw"], reference["image_grid_thw"])
    assert sample.multimodal_inputs == {"images": sent}
    # image tokens are context (loss mask 0); the samples file round-trips the tensors
    line = json.loads(json.dumps(sample.to_dict()))
    back = Sample.from_dict(line)
    assert torch.equal(back.multimodal_train_inputs["pixel_values"], mm["pixel_values"])
    assert containers() == []


def test_tiny_vlm_drives_the_multimodal_task_natively_and_verify_agrees(
    chart_row, tiny_vlm_dir, tmp_path, capsys
):
    out = tmp_path / "run"
    code = main(
        [
            "run", "--dataset", str(MULTIMODAL), "--agent", "native", "--policy", f"hf:{tiny_vlm_dir}",
            "--max-turns", "2", "--max-new-tokens", "8", "--max-context", "4096",
            "--temperature", "1.0", "--native-option", "on_no_tool_call=nudge",
            "--sandbox-option", f"run_id={RUN_ID}", "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    capsys.readouterr()
    (record,) = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert record["turns"] == 2 and record["failure_kind"] == "model", record
    (line,) = (out / "samples.jsonl").read_text().splitlines()
    sample = Sample.from_dict(json.loads(line))
    sample.check()
    (url,) = sample.multimodal_inputs["images"]
    assert decoded(url) == LEGEND.read_bytes()  # the legend, shown with the task
    from coding_agent_rl.multimodal.processor import VisionProcessor

    vision = VisionProcessor.load(tiny_vlm_dir)
    (item,) = vision.process_bytes([LEGEND.read_bytes()])
    assert vision.runs(sample.tokens) == [item.tokens]
    assert torch.equal(sample.multimodal_train_inputs["pixel_values"], item.train["pixel_values"])
    code = main(
        ["verify-logprobs", str(out / "samples.jsonl"), "--model", str(tiny_vlm_dir), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] is True and report["max_abs"] < 1e-3, report
    assert report["trained"] == sum(sample.loss_mask) > 0
    assert containers() == []


async def test_native_coding_env_shows_problem_images_and_viewed_image_files(
    chart_row, tiny_vlm_dir, vision, tmp_path
):
    """The coding environment (native loop, scripted policy, a VLM-engine stand-in): the task's
    ``problem_images`` come with the task; ``file_editor view`` of a PNG answers with the image;
    both are in the sample (tokens, image_data, tensors) and the fix is graded solved."""
    from support.rollout_helpers import base_sample, rollout_config

    steps = [
        {"tool": {"name": "file_editor", "arguments": {"command": "view", "path": "docs/legend.png"}}},
        *({"shell": c} for c in patch_commands(chart_row.patch, chart_row.workdir)),
        {"tool": {"name": "submit", "arguments": {}}},
    ]  # fmt: skip
    spec = write_script(tmp_path / "view_png.json", [{"match_prompt": "design legend", "steps": steps}])  # fmt: skip
    async with runtime(
        policy=spec,
        agent="native",
        rollout=rollout_config(tmp_path / "out"),
        vision=str(tiny_vlm_dir),
    ) as rt:
        outcome = await rt.runner.run(chart_row, base_sample(chart_row, 0))
        requests = list(rt.policy_server.requests)
    record, (sample,) = outcome.record, outcome.samples
    assert record["failure_kind"] is None and record["reward"] == 1.0, record
    legend = LEGEND.read_bytes()
    assert [decoded(u) for u in sample.multimodal_inputs["images"]] == [legend, legend]
    assert [len(r["image_data"]) for r in requests] == [1, 2] + [2] * (len(requests) - 2)
    (item,) = vision.process_bytes([legend])
    assert vision.runs(sample.tokens) == [item.tokens, item.tokens]
    assert torch.equal(
        sample.multimodal_train_inputs["pixel_values"], torch.cat([item.train["pixel_values"]] * 2)
    )
    assert "Image /testbed/docs/legend.png (1097 bytes):" in sample.response
    assert containers() == []
