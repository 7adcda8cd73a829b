"""``hf:MODEL_DIR`` — a real causal LM from a local directory, sampled on CPU with transformers.

A vision-language checkpoint (its config has a ``vision_config``, e.g. the tiny Qwen2-VL of
``tiny_vlm.py``) is loaded with ``AutoModelForImageTextToText`` and its image processor; requests
with ``image_data`` are run with the processor's ``pixel_values`` / ``image_grid_thw`` and
``mm_token_type_ids``, one full forward pass per sampled token (no KV cache: the same computation
a teacher-forced rescoring does, so the logprobs agree to float rounding).

Logprobs: the logprob of each sampled token under ``log_softmax(logits / temperature)`` over the
full vocabulary (``log_softmax(logits)`` when greedy), i.e. what a trainer recomputes for the
same temperature; top-k / top-p only restrict which token is *drawn*, as in SGLang.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

from coding_agent_rl.policy.base import Completion, GenerateRequest, Policy, PolicyEnv

GREEDY_BELOW = 1e-6  # SGLang's rule: a smaller temperature means greedy


def _number(value: Any, default: float) -> float:
    """A sampling parameter as a number (``default`` when absent)."""
    return float(value) if value is not None else default


def sample_token(logits: Any, params: dict[str, Any], generator: Any) -> tuple[int, float]:
    """Draw one token from 1-D ``logits``; returns ``(token id, logprob)``."""
    import torch

    temperature = _number(params.get("temperature"), 1.0)
    if temperature < GREEDY_BELOW:
        logprobs = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits))
        return token, float(logprobs[token])
    scaled = logits / temperature
    logprobs = torch.log_softmax(scaled, dim=-1)
    filtered = scaled.clone()
    top_k = int(params.get("top_k") or -1)
    if 0 < top_k < filtered.numel():
        kth = torch.topk(filtered, top_k).values[-1]
        filtered[filtered < kth] = float("-inf")
    top_p = _number(params.get("top_p"), 1.0)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        drop = torch.cumsum(probs, dim=-1) - probs > top_p  # keep the smallest set reaching top_p
        filtered[order[drop]] = float("-inf")
    token = int(torch.multinomial(torch.softmax(filtered, dim=-1), 1, generator=generator))
    return token, float(logprobs[token])


class HFPolicy(Policy):
    name = "hf"

    def __init__(self, model_dir: str, *, seed: int = 0):
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

        from coding_agent_rl.policy.tiny_vlm import is_vision_checkpoint

        self.model_dir = model_dir
        self.vision: Any = None  # the checkpoint's VisionProcessor, for a VLM
        if is_vision_checkpoint(model_dir):
            from coding_agent_rl.multimodal.processor import VisionProcessor

            self.model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
            self.vision = VisionProcessor.load(model_dir)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model.eval()
        # transformers 5.24 renamed the KV-cache argument (`past_key_values` warns from then on).
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        # Only the last position's logits are sampled from: computing the vocabulary's logits
        # at every prompt position costs seconds per thousand tokens (and GBs) on CPU.
        self._last_only = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.seed = seed
        self._lock = threading.Lock()  # one generation at a time: torch already uses all cores

    async def generate(self, request: GenerateRequest, env: PolicyEnv) -> Completion:
        return await asyncio.to_thread(self._generate, request, env)

    def _generate(self, request: GenerateRequest, env: PolicyEnv) -> Completion:
        import torch
        from transformers import DynamicCache

        params = request.sampling
        limit = int(_number(params.get("max_new_tokens"), 128))
        stop_ids = set(params.get("stop_token_ids") or []) | {env.end_id}
        if not params.get("ignore_eos") and env.tokenizer.eos_token_id is not None:
            stop_ids.add(int(env.tokenizer.eos_token_id))
        seed = params.get("sampling_seed", self.seed)
        generator = torch.Generator().manual_seed(int(seed))
        ids: list[int] = []
        logprobs: list[float] = []
        finish: dict[str, Any] = {"type": "length", "length": 0}
        if self.vision is not None:
            with self._lock, torch.no_grad():
                return self._generate_vision(request, params, limit, stop_ids, generator)
        with self._lock, torch.no_grad():
            cache = DynamicCache()
            step_input = torch.tensor([request.input_ids], dtype=torch.long)
            for _ in range(limit):
                if request.aborted.is_set():
                    finish = {"type": "abort", "message": "aborted by /abort_request"}
                    break
                # The DynamicCache is updated in place.
                kwargs = {self._cache_arg: cache, **self._last_only}
                out = self.model(input_ids=step_input, use_cache=True, **kwargs)
                token, logprob = sample_token(out.logits[0, -1].float(), params, generator)
                ids.append(token)
                logprobs.append(logprob)
                if token in stop_ids:
                    finish = {"type": "stop", "matched": token}
                    break
                step_input = torch.tensor([[token]], dtype=torch.long)
        if finish["type"] == "length":
            finish["length"] = len(ids)
        return Completion(ids, logprobs, finish)

    def _generate_vision(
        self, request: GenerateRequest, params: dict[str, Any], limit: int, stop_ids: set, gen: Any
    ) -> Completion:
        ids, logprobs = list(request.input_ids), []
        finish: dict[str, Any] = {"type": "length", "length": 0}
        for _ in range(limit):
            if request.aborted.is_set():
                finish = {"type": "abort", "message": "aborted by /abort_request"}
                break
            logits = vision_logits(self.model, ids, request.image_inputs, self.vision.pad_id)
            token, logprob = sample_token(logits[-1].float(), params, gen)
            ids.append(token)
            logprobs.append(logprob)
            if token in stop_ids:
                finish = {"type": "stop", "matched": token}
                break
        out = ids[len(request.input_ids) :]
        if finish["type"] == "length":
            finish["length"] = len(out)
        return Completion(out, logprobs, finish)


def vision_logits(model: Any, ids: list[int], image_inputs: dict[str, Any] | None, pad_id: int):
    """Logits ``[len(ids), vocab]`` of a VLM for ``ids`` with the images' processor tensors."""
    import torch

    x = torch.tensor([ids], dtype=torch.long)
    kwargs: dict[str, Any] = {}
    if image_inputs:
        kwargs = {
            "pixel_values": image_inputs["pixel_values"],
            "image_grid_thw": image_inputs["image_grid_thw"],
            "mm_token_type_ids": (x == pad_id).long(),
        }
    return model(input_ids=x, use_cache=False, **kwargs).logits[0]
