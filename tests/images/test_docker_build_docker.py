"""Builds that fail or are interrupted leave nothing in Docker. The classic builder, as the
docker CLI and SDK call it by default, leaves a failed step's container and the layers it
committed (shown first, defence off); ``images build`` removes both, and on Ctrl-C stops the
build at once and removes what it made. Checked by the ids the build's own log shows (other
builds share the engine)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from coding_agent_rl.cli import main

pytestmark = pytest.mark.docker
CLI = [sys.executable, "-m", "coding_agent_rl.cli"]


def made_by(log: str) -> tuple[list[str], list[str]]:
    """(containers, images) the build's output shows it creating (not FROM, not cached)."""
    containers, images, cached, step = [], [], False, 0
    for line in log.splitlines():
        if line.startswith("Step "):
            step += 1
        elif m := re.match(r"^ ---> Running in ([0-9a-f]+)$", line):
            containers.append(m.group(1))
        elif line == " ---> Using cache":
            cached = True
        elif m := re.match(r"^ ---> ([0-9a-f]{12,})$", line):
            images += [] if cached or step == 1 else [m.group(1)]
            cached = False
    return containers, images


def exists(kind: str, ident: str) -> bool:
    return subprocess.run(["docker", kind, "inspect", ident], capture_output=True).returncode == 0


def dataset(tmp_path, run: str) -> tuple[str, str]:
    """A one-row dataset whose image builds from a Dockerfile ending in ``run``."""
    from coding_agent_rl.images.common import BASE_IMAGE

    nonce = uuid.uuid4().hex[:12]  # no step of this build is in the engine's cache
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nRUN echo {nonce} > /nonce\nRUN set -x; {run}\n"
    )
    image = f"coding-agent-rl/test-build-{nonce}:latest"
    md = {"instance_id": f"b-{nonce}", "image": image, "workdir": "/", "problem_statement": "p",
          "test_cmd": "true", "eval_cmd": "true", "build": {"context": "ctx"}}  # fmt: skip
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"metadata": md}) + "\n")
    return str(rows), image


def test_the_classic_builders_defaults_leave_a_failed_step_behind(tmp_path):
    """Defence off: ``rm=True`` alone (the CLI's default) keeps the failed step's container and
    the layer the step before it committed."""
    import docker

    _, image = dataset(tmp_path, "exit 3")
    client = docker.from_env()
    out = "".join(
        c.get("stream", "") + c.get("error", "")
        for c in client.api.build(path=str(tmp_path / "ctx"), tag=image, rm=True, decode=True)
    )
    containers, images = made_by(out)
    try:
        assert "returned a non-zero code: 3" in out
        assert exists("container", containers[-1]) and exists("image", images[-1])
    finally:
        for c in containers:
            subprocess.run(["docker", "rm", "-f", c], capture_output=True)
        for i in reversed(images):
            subprocess.run(["docker", "rmi", i], capture_output=True)
        client.close()


def test_a_failed_build_names_its_cause_and_leaves_nothing(tmp_path, capsys):
    rows, image = dataset(tmp_path, "echo 'ERROR: the step says why' >&2; exit 3")
    assert main(["images", "build", "--dataset", rows]) == 1
    (line, summary) = capsys.readouterr().out.splitlines()
    log = tmp_path / "rows.build-logs" / f"{re.sub(r'[/:]', '_', image)}.log"
    assert line.startswith(
        f"failed  {image} (1 row): docker build of {image} failed: ERROR: the step says why; "
        "failed command: echo "
    ), line
    assert f"; log: {log}; reproduce: docker build -f " in line
    containers, images = made_by(log.read_text())
    assert containers and images and summary == "0/1 images ready"
    assert not any(exists("container", c) for c in containers)
    assert not any(exists("image", i) for i in images) and not exists("image", image)


def test_ctrl_c_stops_the_build_at_once_and_leaves_nothing(tmp_path):
    step_s = 120  # what the interrupted step would take
    rows, image = dataset(tmp_path, f"echo started; sleep {step_s}")
    log = tmp_path / "rows.build-logs" / f"{re.sub(r'[/:]', '_', image)}.log"
    p = subprocess.Popen([*CLI, "images", "build", "--dataset", rows],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (log.is_file() and "started" in log.read_text()):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.2)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        stopped_s = time.monotonic() - t0
        assert stopped_s < step_s / 4, stopped_s  # not waiting the step out
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and err.splitlines()[-1] == "coding-agent-rl images: interrupted"
    containers, images = made_by(log.read_text())
    assert containers and images  # the sleeping step had started, after a committed layer
    assert not any(exists("container", c) for c in containers)
    assert not any(exists("image", i) for i in images) and not exists("image", image)
