"""``coding-agent-rl policy-server`` as a real process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_policy_server_command_serves_generate(tmp_path, renderer):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"say": "hello from the script"}]}))
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coding_agent_rl.cli",
            "policy-server",
            "--policy",
            f"scripted:{script}",
            "--port",
            str(port),
            "--tool-parser",
            "qwen3_coder",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "policy server did not come up"
                time.sleep(0.3)
        ids = renderer.render([{"role": "user", "content": "hi"}], None)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/generate",
            data=json.dumps({"input_ids": ids, "return_logprob": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            out = json.load(resp)
        assert out["text"] == "hello from the script"
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()


def test_policy_server_command_rejects_bad_specs(tmp_path):
    for spec in ("nonsense", f"scripted:{tmp_path}/missing.json", "hf:/no/such/dir"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "coding_agent_rl.cli",
                "policy-server",
                "--policy",
                spec,
                "--port",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and "error:" in r.stderr
