"""Fixtures for grading tests: the bundled example tasks, their images, and diffs made with git."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

from coding_agent_rl.datasets.schema import TaskRow, load_dataset

EXAMPLES = pathlib.Path(__file__).parents[2] / "coding_agent_rl" / "datasets" / "examples"


@pytest.fixture(scope="session")
def example_rows() -> dict[str, TaskRow]:
    return {r.instance_id.split("__", 1)[1]: r for r in load_dataset(EXAMPLES / "tasks.jsonl")}


@pytest.fixture(scope="session")
def example_images(example_rows) -> None:
    """Build the example images (instant when up to date); needs the base image."""
    from coding_agent_rl.images.base import BASE_IMAGE, image_exists
    from coding_agent_rl.images.dataset import build_dataset_images

    if not image_exists(BASE_IMAGE):
        pytest.fail(f"{BASE_IMAGE} is missing: run `coding-agent-rl images base` first")
    build_dataset_images(EXAMPLES / "tasks.jsonl")


def _git(cwd: pathlib.Path, *args: str, input: str | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        input=input,
    ).stdout


@pytest.fixture
def make_diff(tmp_path):
    """``make_diff(task, {path: text | bytes | None}, gold=False)`` -> a git diff against the
    task's base, as an agent would produce it (None deletes the file)."""

    def make(task: str, edits: dict[str, str | bytes | None], *, gold: bool = False) -> str:
        repo = tmp_path / f"{task}-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(EXAMPLES / task / "repo", repo)
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "base")
        if gold:
            _git(repo, "apply", "-", input=(EXAMPLES / task / "gold.patch").read_text())
        for path, content in edits.items():
            target = repo / path
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        _git(repo, "add", "-A")
        return _git(repo, "diff", "--cached", "--binary")

    return make
