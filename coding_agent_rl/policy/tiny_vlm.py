"""Tiny random-weight checkpoints, built offline: the ``hf:`` models of the CPU tests and benches.

No model hub is reachable here, so they are made from configs with transformers' own classes
(the code path of a real checkpoint). :func:`build_tiny_lm`: a Qwen3ForCausalLM over our
tokenizer's vocabulary (the text policy). :func:`build_tiny_vlm`: a Qwen2-VL checkpoint with our
offline Qwen tokenizer (its vision tokens ``<|vision_start|>`` 151652, ``<|vision_end|>``
151653, ``<|image_pad|>`` 151655), the real ``Qwen2VLImageProcessor`` (saved as a real
checkpoint saves it; small ``min/max_pixels`` so a screenshot becomes a handful of image tokens)
and ``Qwen2VLForConditionalGeneration`` with the same two text layers of width 64 and a
one-block vision tower. ``coding-agent-rl tokenizer tiny-vlm --out DIR`` writes one; ``hf:DIR``
serves it, ``verify-logprobs --model DIR`` rescores with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coding_agent_rl.tokenizer import qwen3_tokenizer_dir

PATCH, MERGE = 14, 2
DEFAULT_MIN_PIXELS = 28 * 28
DEFAULT_MAX_PIXELS = 112 * 112  # at most 16 image tokens per image
# The text model of both: two layers of width 64.
TEXT_DIMS: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "tie_word_embeddings": True,
}


def _token_id(tokenizer: Any, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    assert isinstance(found, int), f"{token} is not one token of this tokenizer"
    return found


def build_tiny_lm(out_dir: str | Path, vocab_size: int, *, seed: int = 0) -> Path:
    """Write a seeded Qwen3ForCausalLM (config and weights, no tokenizer) to ``out_dir``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size, head_dim=32, max_position_embeddings=4096, **TEXT_DIMS
    )
    torch.manual_seed(seed)
    Qwen3ForCausalLM(config).save_pretrained(str(out_dir))
    return Path(out_dir)


def build_tiny_vlm(
    out_dir: str | Path,
    *,
    seed: int = 0,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> Path:
    """Write the checkpoint (tokenizer, image processor, config, weights) to ``out_dir``."""
    import torch
    from transformers import AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    tokenizer.save_pretrained(str(out))
    Qwen2VLImageProcessorPil(
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        patch_size=PATCH,
        temporal_patch_size=2,
        merge_size=MERGE,
    ).save_pretrained(str(out))
    special = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
    ids = {t: _token_id(tokenizer, t) for t in special}
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            **TEXT_DIMS,
            "max_position_embeddings": 32768,
            "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
        },
        vision_config={
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 64,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": 2,
            "in_channels": 3,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    Qwen2VLForConditionalGeneration(config).save_pretrained(str(out))
    return out


def is_vision_checkpoint(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` holds a VLM (its config has a ``vision_config``)."""
    import json

    path = Path(model_dir) / "config.json"
    try:
        return "vision_config" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False
