"""Loading a run whose samples hold images for the report keeps a count of them, not their
base64 bytes or tensors (a 20-screenshot sample would otherwise hold ~100 MB per sample in the
report process)."""

from __future__ import annotations

import json

import torch

from coding_agent_rl.report import load_run, render_report
from coding_agent_rl.types import Sample


def test_report_counts_images_and_leaves_their_bytes_out(tmp_path):
    s = Sample(index=0, rollout_id=0, tokens=[1, 2, 3], response_length=1, loss_mask=[1], rollout_log_probs=[-0.1])  # fmt: skip
    big = "data:image/png;base64," + "A" * 200_000
    s.multimodal_inputs = {"images": [big, big]}
    s.multimodal_train_inputs = {"pixel_values": torch.zeros(64, 1176)}
    (tmp_path / "samples.jsonl").write_text(json.dumps(s.to_dict()) + "\n")
    (tmp_path / "results.jsonl").write_text(json.dumps({"rollout_id": 0, "reward": 1.0}) + "\n")
    (rollout,) = load_run(tmp_path).rollouts
    assert rollout.samples[0]["multimodal_inputs"] == {"images": 2}
    assert "multimodal_train_inputs" not in rollout.samples[0]
    html = render_report(tmp_path, tmp_path / "report.html").read_text()
    assert "A" * 1000 not in html
