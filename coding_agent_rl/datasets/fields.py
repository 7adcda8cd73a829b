"""Coercion of single metadata fields (lists that may be JSON strings, files next to the
dataset, build contexts); parse_row in schema.py composes them."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from coding_agent_rl.datasets.buildspec import BuildSpec


def coerce_prompt(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for m in prompt:
            if isinstance(m, dict) and m.get("role") == "user":
                c = m.get("content")
                if isinstance(c, str):
                    return c
                if isinstance(c, list):
                    return "\n".join(
                        p.get("text", "")
                        for p in c
                        if isinstance(p, dict) and p.get("type") == "text"
                    )
    return ""


def first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def test_ids(value: Any, key: str) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{key} is a string but not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of test ids (strings)")
    return tuple(value)


def str_list(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a string or a list of strings")
    return tuple(value)


def commands(value: Any, key: str) -> tuple[str, ...]:
    """A shell script (str) or a list of commands -> the commands, in order."""
    if value is None or value == "" or value == []:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v for v in value if v)
    raise ValueError(f"{key} must be a string or a list of strings")


def file_text(md: dict, key: str, base_dir: pathlib.Path) -> str | None:
    """``key`` inline, or ``key + '_file'`` naming a file relative to the dataset."""
    if md.get(key) not in (None, ""):
        if not isinstance(md[key], str):
            raise ValueError(f"{key} must be a string")
        return md[key]
    ref = md.get(f"{key}_file")
    if ref is None:
        return None
    path = base_dir / ref
    if not path.is_file():
        raise ValueError(f"{key}_file {ref!r} not found (relative to {base_dir})")
    return path.read_text()


def read_host(ref: Any, base_dir: pathlib.Path, key: str) -> str:
    if not ref:
        raise ValueError(f"log_parser 'swepro' needs {key}")
    path = base_dir / ref
    if not path.is_file():
        raise ValueError(f"{key} {ref!r} not found")
    return path.read_text()


def build_spec(value: Any, base_dir: pathlib.Path) -> BuildSpec | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = {"context": value}
    if not isinstance(value, dict) or not isinstance(value.get("context"), str):
        raise ValueError("build must be {'context': DIR, 'dockerfile': FILE}")
    context = (base_dir / value["context"]).resolve()
    if not context.is_dir():
        raise ValueError(f"build context {value['context']!r} is not a directory")
    dockerfile = (
        (base_dir / value["dockerfile"]) if value.get("dockerfile") else context / "Dockerfile"
    )
    if not dockerfile.is_file():
        raise ValueError(
            f"build dockerfile {str(value.get('dockerfile', 'Dockerfile'))!r} not found"
        )
    return BuildSpec(context=context, dockerfile=dockerfile.resolve())
