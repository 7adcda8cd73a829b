"""SWE-bench-schema records -> rows: SWE-bench (Lite / Verified / full / Multimodal), SWE-Gym and
SWE-rebench share the fields and differ in container images, extras and how tests run.

Multimodal's picture links are kept as data; SWE-rebench's ``install_config`` is kept; the test
command is SWE-rebench's, the ``swebench`` spec's, or plain pytest. Details:
docs/modules/datasets.md.
"""

from __future__ import annotations

import json
import pathlib
import re
import shlex
from typing import Any

from coding_agent_rl.datasets.convert import (
    CONDA,
    DEFAULT_IMAGES,
    ConvertError,
    each_record,
    ids,
    image_fields,
    pytest_files,
)
from coding_agent_rl.datasets.log_parsers import PYTEST_FAMILY, needed_parser_hint

_IMAGE_LINK = re.compile(
    r"!\[[^\]]*\]\((\S+?)\)|<img[^>]+src=[\"']([^\"']+)|(https?://\S+?\.(?:png|jpe?g|gif|webp|svg))",
    re.IGNORECASE,
)
PYTEST = "python3 -m pytest -rA -p no:cacheprovider"


def problem_images(problem: str, assets: dict[str, Any]) -> list[str]:
    """Image URLs of the problem statement: ``image_assets`` first, then its links."""
    found = [str(u) for u in assets.get("problem_statement") or [] if isinstance(u, str)]
    for m in _IMAGE_LINK.finditer(problem):
        found.append(next(g for g in m.groups() if g))
    return list(dict.fromkeys(found))


def _assets(rec: dict[str, Any]) -> dict[str, Any]:
    raw = rec.get("image_assets")
    if not raw:
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        raise ConvertError("image_assets is not JSON") from None
    return value if isinstance(value, dict) else {}


def _swebench_test_cmd(rec: dict[str, Any], files: list[str]) -> tuple[str, str] | None:
    """(test_cmd, log_parser) from the swebench package's specs when it is installed."""
    from coding_agent_rl.datasets.recipes import swebench_spec

    spec = swebench_spec(rec.get("repo"), rec.get("version"))
    if not spec or not spec.get("test_cmd"):
        return None
    cmd = spec["test_cmd"]
    cmd = cmd[-1] if isinstance(cmd, list) else cmd
    return f"{CONDA}{cmd} {' '.join(files)}", "swebench"


def _rebench_test_cmd(config: dict[str, Any], files: list[str]) -> str | None:
    """SWE-rebench's own pytest command, made to print the ``-rA`` summary our parser reads."""
    cmd = str(config.get("test_cmd") or "")
    parser = str(config.get("log_parser") or "parse_log_pytest")
    if "pytest" not in cmd or parser not in PYTEST_FAMILY:
        return None
    words = shlex.split(cmd)
    if "-rA" not in words:
        words.append("-rA")
    if "no:cacheprovider" not in cmd:
        words += ["-p", "no:cacheprovider"]
    return f"{CONDA}{shlex.join(words)} {' '.join(shlex.quote(f) for f in files)}"


def convert_swebench_like(
    rec: dict[str, Any], source: str, template: str, *, explicit: bool = False
) -> dict[str, Any]:
    """One SWE-bench-schema record -> row metadata. ``explicit``: ``template`` was given by the
    user (it wins over an image name the record carries)."""
    f2p, p2p = ids(rec.get("FAIL_TO_PASS")), ids(rec.get("PASS_TO_PASS"))
    if not rec.get("base_commit"):
        raise ConvertError("missing base_commit")
    files = pytest_files(f2p + p2p) or re.findall(
        r"^\+\+\+ b/(\S+)", rec.get("test_patch") or "", re.M
    )
    image = template.format(**image_fields(rec))
    own_image = rec.get("image_name") or rec.get("docker_image")
    if source == "swe-rebench" and own_image and not explicit:
        image = str(own_image)
    problem = rec.get("problem_statement") or ""
    md: dict[str, Any] = {
        "instance_id": rec["instance_id"],
        "repo": rec.get("repo"),
        "version": rec.get("version"),
        "image": image,
        "workdir": "/testbed",
        "problem_statement": problem,
        "base_commit": rec.get("base_commit"),
        "patch": rec.get("patch"),
        "test_patch": rec.get("test_patch"),
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
    }
    assets = _assets(rec)
    if assets:
        md["image_assets"] = assets
    images = problem_images(problem, assets)
    if images:
        md["problem_images"] = images
    config = rec.get("install_config")
    if isinstance(config, str) and config.strip():
        config = json.loads(config)
    if isinstance(config, dict) and config:
        md["install_config"] = config
    node_ids = all("::" in t for t in f2p + p2p)
    rebench = _rebench_test_cmd(config, files) if isinstance(config, dict) and node_ids else None
    official = None if rebench else _swebench_test_cmd(rec, files)
    if rebench:
        md["test_cmd"] = rebench
    elif official:
        md["test_cmd"], md["log_parser"] = official
    elif node_ids:
        md["test_cmd"] = f"{CONDA}{PYTEST} {' '.join(files)}"
    else:
        declared = config.get("log_parser") if isinstance(config, dict) else None
        raise ConvertError(
            "test ids are not pytest node ids: "
            + needed_parser_hint(rec.get("repo"), declared if declared else None)
        )
    return md


def _converter(source: str) -> Any:
    def convert(
        in_path: pathlib.Path, out_dir: pathlib.Path, *, image_template: str | None = None
    ) -> tuple[list[dict[str, Any]], list[str]]:
        def one(rec: dict[str, Any], template: str) -> dict[str, Any]:
            return convert_swebench_like(rec, source, template, explicit=bool(image_template))

        return each_record(in_path, out_dir, image_template or DEFAULT_IMAGES[source], one)

    convert.__doc__ = f"The {source} converter (registered in ``CONVERTERS``)."
    return convert


convert_swebench = _converter("swebench")
convert_swe_gym = _converter("swe-gym")
convert_swe_rebench = _converter("swe-rebench")
