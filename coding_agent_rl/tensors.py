"""``multimodal_train_inputs`` in JSON (``samples.jsonl``): tensors as dtype + shape + base64 of
their raw bytes, so a sample read back holds the very tensors the rollout produced."""

from __future__ import annotations

import base64
from typing import Any

TAG = "__tensor__"


def tensors_to_json(inputs: dict[str, Any] | None) -> dict[str, Any] | None:
    if inputs is None:
        return None
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if hasattr(value, "detach") and hasattr(value, "dtype"):
            t = value.detach().cpu().contiguous()
            raw = t.numpy().tobytes()
            out[key] = {
                TAG: True,
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape),
                "data": base64.b64encode(raw).decode(),
            }
        else:
            out[key] = value
    return out


def tensors_from_json(data: dict[str, Any] | None) -> dict[str, Any] | None:
    if data is None:
        return None
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value.get(TAG):
            import numpy as np
            import torch

            raw = base64.b64decode(value["data"])
            array = np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"])
            out[key] = torch.from_numpy(array.copy())
        else:
            out[key] = value
    return out
