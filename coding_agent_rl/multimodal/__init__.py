"""Pictures on the token path, shared by the native loop (``env/``) and the CLI adapter.

``pictures.py`` decodes with bounds; ``processor.py`` is a VLM's image processor (token counts,
placeholder expansion, :func:`defuse`); ``parts.py`` readies picture parts of chat messages;
``buffer.py`` merges per-turn training tensors once per key. slime's field names:
``multimodal_inputs`` (the raw pictures) and ``multimodal_train_inputs`` (processor tensors).
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
