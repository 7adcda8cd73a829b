"""Train/inference mismatch check: rescore every trained token with a Hugging Face model.

One teacher-forced forward pass per sample, the LM head only on trained positions in chunks; a
VLM rescores with the sample's own training tensors. ``torch`` and ``transformers`` are imported
only when a model is loaded. Details: docs/modules/policy.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Iterable
from typing import Any

from coding_agent_rl.types import Sample

HEAD_CHUNK = 1024  # positions per LM-head call


@dataclasses.dataclass
class SampleCheck:
    line: int  # 1-based line in the JSONL file (or position in the input)
    index: int | None
    rollout_id: Any
    segment: str | None
    trained: int
    max_abs: float
    mean_abs: float


@dataclasses.dataclass
class Report:
    samples: list[SampleCheck]
    skipped: int  # aborted / removed samples, or samples with no trained token
    trained: int
    max_abs: float
    mean_abs: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_samples(path: str | pathlib.Path) -> list[Sample]:
    """Samples from a JSONL file of ``Sample.to_dict()`` lines (blank lines ignored)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Sample.from_dict(json.loads(line)))
            except (ValueError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a sample: {e}") from e
    return out


def load_model(model_dir: str | pathlib.Path, *, dtype: str = "float32", device: str = "cpu"):
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from coding_agent_rl.policy.tiny_vlm import is_vision_checkpoint

    auto: Any = (
        AutoModelForImageTextToText if is_vision_checkpoint(model_dir) else AutoModelForCausalLM
    )
    model = auto.from_pretrained(str(model_dir), dtype=getattr(torch, dtype))
    return model.to(device).eval()


def _hidden(model: Any, sample: Sample, ids: Any) -> Any:
    """Last hidden states ``[len, hidden]``; a VLM gets the sample's image tensors."""
    mm = sample.multimodal_train_inputs or {}
    vision = getattr(model.config, "vision_config", None) is not None
    if not vision:
        if mm:
            raise ValueError("the sample carries images: rescore it with its vision-language model")
        return model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0]
    pad = model.config.image_token_id
    has_tokens = bool((ids == pad).any())
    if has_tokens != ("pixel_values" in mm):
        raise ValueError(
            "the sample's image tokens and its multimodal_train_inputs do not go together"
        )
    kwargs: dict[str, Any] = {}
    if has_tokens:
        device = ids.device
        kwargs = {
            "pixel_values": mm["pixel_values"].to(device),
            "image_grid_thw": mm["image_grid_thw"].to(device),
            "mm_token_type_ids": (ids == pad).long(),
        }
    return model.model(input_ids=ids, use_cache=False, **kwargs).last_hidden_state[0]


def rescore(model: Any, sample: Sample, *, temperature: float = 1.0) -> list[float | None]:
    """Teacher-forced log prob of each response token the sample trains (None where masked)."""
    import torch

    mask = sample.loss_mask or []
    start = len(sample.tokens) - sample.response_length
    positions = [start + i for i, m in enumerate(mask) if m]
    out: list[float | None] = [None] * len(mask)
    if not positions:
        return out
    if positions[0] == 0:
        raise ValueError("a trained token at position 0 has no context to score it")
    vocab = model.get_output_embeddings().weight.shape[0]
    if max(sample.tokens) >= vocab or min(sample.tokens) < 0:
        raise ValueError(f"sample tokens fall outside the model's vocabulary ({vocab})")
    device = next(model.parameters()).device
    ids = torch.tensor([sample.tokens], dtype=torch.long, device=device)
    softcap = getattr(model.config, "final_logit_softcapping", None)
    with torch.no_grad():
        hidden = _hidden(model, sample, ids)
        head = model.get_output_embeddings()
        for lo in range(0, len(positions), HEAD_CHUNK):
            chunk = positions[lo : lo + HEAD_CHUNK]
            rows = torch.tensor([p - 1 for p in chunk], device=device)
            logits = head(hidden[rows]).float()
            if softcap:
                logits = torch.tanh(logits / softcap) * softcap
            logp = torch.log_softmax(logits / temperature, dim=-1)
            target = torch.tensor([sample.tokens[p] for p in chunk], device=device)
            picked = logp.gather(1, target[:, None])[:, 0].tolist()
            for p, lp in zip(chunk, picked, strict=True):
                out[p - start] = lp
    return out


def verify(
    samples: Iterable[Sample], model: Any, *, temperature: float = 1.0, limit: int | None = None
) -> Report:
    checks: list[SampleCheck] = []
    skipped = total = 0
    total_abs = worst = 0.0
    for line, s in enumerate(samples, 1):
        if limit is not None and len(checks) >= limit:
            break
        if s.remove_sample or not s.loss_mask or not any(s.loss_mask):
            skipped += 1
            continue
        s.check()
        scored = rescore(model, s, temperature=temperature)
        diffs = [
            abs(lp - ref)
            for lp, ref in zip(scored, s.rollout_log_probs or [], strict=True)
            if lp is not None
        ]
        checks.append(
            SampleCheck(
                line=line,
                index=s.index,
                rollout_id=s.rollout_id,
                segment=s.metadata.get("segment"),
                trained=len(diffs),
                max_abs=max(diffs),
                mean_abs=sum(diffs) / len(diffs),
            )
        )
        total += len(diffs)
        total_abs += sum(diffs)
        worst = max(worst, max(diffs))
    return Report(
        samples=checks,
        skipped=skipped,
        trained=total,
        max_abs=worst,
        mean_abs=total_abs / total if total else math.nan,
    )
