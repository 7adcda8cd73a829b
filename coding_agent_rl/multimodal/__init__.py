"""Images on the token path, shared by the native loop (``env/``) and the CLI adapter.

* ``images.py`` — decoding with bounds (:class:`ImageLimits`, :class:`ImageGate`), errors that
  are the model's (:class:`ImageError`);
* ``processor.py`` — a VLM image processor: per-image token counts, placeholder expansion,
  :func:`defuse` for vision markers that appear as text;
* ``parts.py`` — image parts in chat messages: resolved, gated, rendered as a VLM sees them or
  as the text-only policy's placeholder;
* ``buffer.py`` — per-turn training tensors merged once per key;
* ``serialize.py`` — those tensors in ``samples.jsonl``.

slime's field names: ``multimodal_inputs`` (``{"images": [data URL, ...]}``, the raw images in
prompt order) and ``multimodal_train_inputs`` (the processor's tensors, e.g. ``pixel_values``
and ``image_grid_thw``).
"""

from __future__ import annotations

from coding_agent_rl.multimodal.pictures import ImageError, ImageGate, ImageLimits, ImageRef
from coding_agent_rl.multimodal.processor import ImageItem, VisionProcessor, defuse

__all__ = [
    "ImageError",
    "ImageGate",
    "ImageItem",
    "ImageLimits",
    "ImageRef",
    "VisionProcessor",
    "defuse",
]
