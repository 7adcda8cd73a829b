"""Task data: the row schema and its validation, test-log parsers, the agent's prompt, dataset
converters (``convert/``), install recipes, and the bundled example tasks."""

from __future__ import annotations

import pathlib


def examples_dataset() -> pathlib.Path:
    """The bundled example tasks (``datasets/examples/tasks.jsonl``)."""
    return pathlib.Path(__file__).parent / "examples" / "tasks.jsonl"
