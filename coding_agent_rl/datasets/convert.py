"""Convert SWE-bench-family datasets (local files) into our JSONL rows.

Inputs are HF-style exports: ``.jsonl``, ``.json`` (a list, or an object holding one), ``.parquet``
(pyarrow), or a directory of those. Image names follow each project's convention unless
``image_template`` is given (``str.format`` fields: ``instance_id``, ``id_1776``, ``id_s``,
``repo``, ``owner``, ``name``, ``image_name``, ``docker_image``, ``task``):

=========  ===================================================================================
swebench     ``swebench/sweb.eval.x86_64.{id_1776}:latest`` (instance id lower-cased, ``__`` ->
             ``_1776_``); SWE-bench Multimodal too (its ``image_assets`` and the image links
             of the problem statement are kept as data: ``metadata.image_assets``,
             ``metadata.problem_images``; nothing is fetched)
swe-gym      ``xingyaoww/sweb.eval.x86_64.{id_s}:latest`` (``__`` -> ``_s_``, lower-cased)
swe-rebench  the row's ``image_name`` / ``docker_image``, else
             ``swerebench/sweb.eval.x86_64.{id_1776}:latest``; its ``install_config`` is kept
             (test command, log parser, and the install recipe ``images build`` uses)
swe-smith  ``jyangballin/{image_name}:latest`` with ``__`` -> ``_1776_`` (row ``image_name``)
r2e-gym    the row's ``docker_image``
harbor     ``environment/Dockerfile`` built by ``images build`` as ``harbor/{task}:latest``, or
           ``[environment].docker_image`` from task.toml (see convert_harbor.py)
=========  ===================================================================================

A row that cannot be expressed is skipped with a reason (e.g. SWE-bench repositories whose test
ids are not pytest node ids: the reason names the SWE-bench log parser they need). Rows keep
``repo`` and ``base_commit``, so ``images build --repo-source`` can build their images.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

from coding_agent_rl.datasets.schema import parse_row
from coding_agent_rl.errors import TaskDataError

SOURCES = ("swebench", "swe-gym", "swe-rebench", "swe-smith", "r2e-gym", "harbor")
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


def convert_records(
    source: str, in_path: pathlib.Path, out_dir: pathlib.Path, *, image_template: str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows for ``source``; returns (rows, skip reasons). Every row is checked with the schema."""
    if source not in SOURCES:
        raise ConvertError(f"unknown source {source!r} (known: {', '.join(SOURCES)})")
    from coding_agent_rl.datasets.convert_gyms import convert_r2e, convert_swe_smith
    from coding_agent_rl.datasets.convert_swebench import convert_swebench_like

    if source == "harbor":
        from coding_agent_rl.datasets.convert_harbor import convert_harbor

        return convert_harbor(in_path, out_dir, image_template=image_template)
    template = image_template or DEFAULT_IMAGES[source]
    rows, skipped = [], []
    for i, rec in enumerate(read_records(in_path)):
        name = rec.get("instance_id") or rec.get("docker_image") or f"record {i}"
        try:
            if source in ("swebench", "swe-gym", "swe-rebench"):
                md = convert_swebench_like(rec, source, template, explicit=bool(image_template))
            elif source == "swe-smith":
                md = convert_swe_smith(rec, template)
            else:
                md = convert_r2e(rec, template)
            md = {k: v for k, v in md.items() if v not in (None, "", [])}
            row = {"prompt": md["problem_statement"], "label": md["instance_id"], "metadata": md}
            parse_row(row, base_dir=out_dir)
        except (ConvertError, KeyError, ValueError) as e:
            skipped.append(f"{name}: {e}")
            continue
        rows.append(row)
    return rows, skipped
