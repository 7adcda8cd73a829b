"""ENOSPC on the run directory: a real, small tmpfs fills up while records are appended.
A full disk must never leave a torn line in ``results.jsonl`` / ``samples.jsonl``: the failed
append is rolled back, the error surfaces, and once space is back the next append is whole."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from coding_agent_rl.rollout.outputs import RunWriter
from coding_agent_rl.types import Sample


@pytest.fixture
def small_disk(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A 1 MiB tmpfs mounted for this test and unmounted on teardown."""
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root")
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)
    assert not os.path.ismount(mnt)


def fill(disk: pathlib.Path, leave: int) -> pathlib.Path:
    """Fill ``disk`` until at most ``leave`` bytes are free."""
    filler = disk / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                st = os.statvfs(disk)
                free = st.f_bavail * st.f_frsize
                if free <= leave:
                    break
                f.write(b"x" * min(4096, free - leave))
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def big_sample(iid: str) -> Sample:
    return Sample(
        index=0, tokens=list(range(20000)), response_length=1, metadata={"instance_id": iid}
    )


def record(iid: str) -> dict[str, object]:
    return {
        "instance_id": iid,
        "sample_index": 0,
        "reward": 1.0,
        "failure_kind": None,
        "pad": "y" * 3000,
    }


def whole_lines(path: pathlib.Path) -> list[dict[str, object]]:
    """Every line parses (a reader skips nothing) and the file ends with a newline."""
    text = path.read_text()
    assert text == "" or text.endswith("\n"), f"{path.name} ends mid-line"
    return [json.loads(line) for line in text.splitlines()]


def test_full_disk_leaves_no_torn_line(small_disk: pathlib.Path) -> None:
    out = small_disk / "run"
    writer = RunWriter(out)
    writer.add([big_sample("a")], record("a"))
    filler = fill(small_disk, leave=4096)
    with pytest.raises(OSError) as err:
        writer.add([big_sample("b")], record("b"))
    assert err.value.errno == errno.ENOSPC
    assert [r["instance_id"] for r in whole_lines(out / "results.jsonl")] == ["a"]
    assert [s["metadata"]["instance_id"] for s in whole_lines(out / "samples.jsonl")] == ["a"]
    filler.unlink()  # space is back: the retry appends whole lines after the earlier ones
    writer.add([big_sample("b")], record("b"))
    writer.close({})
    assert [r["instance_id"] for r in whole_lines(out / "results.jsonl")] == ["a", "b"]
    assert [s["metadata"]["instance_id"] for s in whole_lines(out / "samples.jsonl")] == ["a", "b"]
