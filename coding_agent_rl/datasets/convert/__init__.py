"""Convert SWE-bench-family datasets (local files) into our JSONL rows.

Inputs are HF-style exports (``.jsonl``, ``.json``, ``.parquet`` or a directory of those);
container image names follow each project's convention unless ``image_template`` is given. A row
that cannot be expressed is skipped with a reason. The conventions per dataset:
docs/modules/datasets.md.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

from coding_agent_rl.datasets.schema import parse_row
from coding_agent_rl.errors import TaskDataError
from coding_agent_rl.registry import Registry, UnknownName

DEFAULT_IMAGES = {
    "swebench": "swebench/sweb.eval.x86_64.{id_1776}:latest",
    "swe-gym": "xingyaoww/sweb.eval.x86_64.{id_s}:latest",
    "swe-rebench": "swerebench/sweb.eval.x86_64.{id_1776}:latest",
    "swe-smith": "jyangballin/{image_name}:latest",
    "r2e-gym": "{docker_image}",
}
# SWE-bench-family images keep the repository's environment in a conda env named testbed.
CONDA = (
    "if [ -f /opt/miniconda3/bin/activate ]; then source /opt/miniconda3/bin/activate"
    " && conda activate testbed; fi; "
)


class ConvertError(TaskDataError):
    """A source record that cannot be converted; the message names the record."""


def read_records(path: pathlib.Path) -> Iterator[dict[str, Any]]:
    """Records from a JSON / JSONL / parquet file, or every such file under a directory."""
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl", ".parquet")):
            yield from read_records(f)
        return
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ConvertError(
                "reading parquet needs pyarrow: pip install 'coding-agent-rl[parquet]'"
            ) from e
        yield from pq.read_table(path).to_pylist()
        return
    text = path.read_text()
    if path.suffix == ".jsonl":
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ConvertError(f"{path}:{i}: invalid JSON ({e.msg})") from None
        return
    data = json.loads(text)
    if isinstance(data, dict):
        data = next(
            (data[k] for k in ("rows", "data", "instances", "train", "test") if k in data), [data]
        )
    yield from data


def ids(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    return [str(v) for v in value]


def image_fields(rec: dict[str, Any]) -> dict[str, str]:
    iid = str(rec.get("instance_id") or "")
    repo = str(rec.get("repo") or rec.get("repo_name") or "")
    owner, _, name = repo.partition("/")
    image_name = str(rec.get("image_name") or "").rsplit("/", 1)[-1].split(":")[0]
    return {
        "instance_id": iid,
        "id_1776": iid.lower().replace("__", "_1776_"),
        "id_s": iid.lower().replace("__", "_s_"),
        "repo": repo,
        "owner": owner,
        "name": name,
        "image_name": image_name.replace("__", "_1776_"),
        "docker_image": str(rec.get("docker_image") or ""),
        "task": "",
    }


def pytest_files(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(i.split("::", 1)[0] for i in ids if "::" in i))


Converter = Callable[..., "tuple[list[dict[str, Any]], list[str]]"]
# name -> ``convert(in_path, out_dir, *, image_template=None) -> (rows, skip reasons)``; a third
# party adds one with an entry point in the group ``coding_agent_rl.converters``.
CONVERTERS = Registry(
    "dataset converter",
    "coding_agent_rl.converters",
    {
        "swebench": ("coding_agent_rl.datasets.convert.swebench:convert_swebench", None),
        "swe-gym": ("coding_agent_rl.datasets.convert.swebench:convert_swe_gym", None),
        "swe-rebench": ("coding_agent_rl.datasets.convert.swebench:convert_swe_rebench", None),
        "swe-smith": ("coding_agent_rl.datasets.convert.gyms:convert_swe_smith_rows", None),
        "r2e-gym": ("coding_agent_rl.datasets.convert.gyms:convert_r2e_rows", None),
        "harbor": ("coding_agent_rl.datasets.convert.harbor:convert_harbor", None),
    },
)
SOURCES = tuple(CONVERTERS.names())  # the built-in ones (``coding-agent-rl convert --help``)


def each_record(
    in_path: pathlib.Path,
    out_dir: pathlib.Path,
    template: str,
    convert_one: Callable[[dict[str, Any], str], dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows from ``convert_one(record, image_template)`` per record of ``in_path``; returns
    (rows, skip reasons). Every row is checked with the schema."""
    rows, skipped = [], []
    for i, rec in enumerate(read_records(in_path)):
        name = rec.get("instance_id") or rec.get("docker_image") or f"record {i}"
        try:
            md = convert_one(rec, template)
            md = {k: v for k, v in md.items() if v not in (None, "", [])}
            row = {"prompt": md["problem_statement"], "label": md["instance_id"], "metadata": md}
            parse_row(row, base_dir=out_dir)
        except (ConvertError, KeyError, ValueError) as e:
            skipped.append(f"{name}: {e}")
            continue
        rows.append(row)
    return rows, skipped


def convert_records(
    source: str, in_path: pathlib.Path, out_dir: pathlib.Path, *, image_template: str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows for ``source`` (a :data:`CONVERTERS` name); returns (rows, skip reasons)."""
    try:
        convert = CONVERTERS.load(source)
    except UnknownName as e:
        raise ConvertError(str(e)) from None
    rows, skipped = convert(in_path, out_dir, image_template=image_template)
    return rows, skipped
