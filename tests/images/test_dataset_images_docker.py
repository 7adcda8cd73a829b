"""`build_dataset_images`: generic over rows with a build context, idempotent by content hash."""

from __future__ import annotations

import json
import logging
import subprocess

import pytest

from coding_agent_rl.images.dataset import HASH_LABEL, build_dataset_images

IMAGE = "coding-agent-rl/test-images-idempotent:latest"


def image_id(name: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.docker
def test_builds_once_and_rebuilds_when_the_context_changes(tmp_path, caplog):
    ctx = tmp_path / "ctx"
    (ctx / "repo").mkdir(parents=True)
    (ctx / "repo" / "a.py").write_text("A = 1\n")
    (ctx / "Dockerfile").write_text(
        "FROM coding-agent-rl/base:latest\nCOPY repo/ /testbed/\nWORKDIR /testbed\n"
        "RUN git init -q . && git add -A && git -c user.name=t -c user.email=t@t commit -qm base\n"
    )
    row = {
        "metadata": {
            "instance_id": "img-test",
            "image": IMAGE,
            "workdir": "/testbed",
            "problem_statement": "p",
            "eval_cmd": "true",
            "build": {"context": "ctx"},
        }
    }
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps(row) + "\n")
    try:
        assert build_dataset_images(dataset) == [IMAGE]
        first = image_id(IMAGE)
        label = subprocess.run(
            [
                "docker",
                "image",
                "inspect",
                "-f",
                '{{ index .Config.Labels "' + HASH_LABEL + '" }}',
                IMAGE,
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert len(label) == 32

        caplog.clear()
        with caplog.at_level(logging.INFO, logger="coding_agent_rl.images.dataset"):
            build_dataset_images(dataset)
        said = [r.getMessage() for r in caplog.records]
        assert image_id(IMAGE) == first
        assert said == [f"{IMAGE} is up to date ({label})"], said  # no docker build ran

        (ctx / "repo" / "a.py").write_text("A = 2\n")
        build_dataset_images(dataset)
        assert image_id(IMAGE) != first
        # The image the tag named before is not left dangling.
        assert subprocess.run(["docker", "image", "inspect", first], capture_output=True).returncode
    finally:
        subprocess.run(["docker", "rmi", "-f", IMAGE], capture_output=True)
