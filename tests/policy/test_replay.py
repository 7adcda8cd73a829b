"""The replay policy: the registered gold patch is applied by running, with real bash and git, the
shell commands it emits (exactly what an agent CLI's shell tool would run)."""

from __future__ import annotations

import subprocess

import aiohttp

from coding_agent_rl.model.parsers import parse_assistant
from coding_agent_rl.policy.replay import CHUNK, DONE, NO_PATCH, ReplayPolicy
from coding_agent_rl.policy.server import PolicyServer

BASH = [
    {
        "type": "function",
        "function": {
            "name": "Bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def git(repo, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def make_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "app.py").write_text("def add(a, b):\n    return a - b\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return repo


def gold_patch(repo, edit) -> str:
    edit()
    git(repo, "add", "-N", ".")
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", ".")
    git(repo, "clean", "-fdq")
    return patch


async def drive(url: str, renderer, tokenizer, sid: str, max_turns: int = 20) -> list[str]:
    """Play the agent loop: run each emitted shell command until the policy answers in text."""
    messages = [{"role": "user", "content": "solve the task"}]
    texts = []
    async with aiohttp.ClientSession() as http:
        for _ in range(max_turns):
            body = {
                "input_ids": renderer.render(messages, BASH),
                "sampling_params": {"max_new_tokens": 100_000},
                "return_logprob": True,
            }
            async with http.post(
                f"{url}/generate", json=body, headers={"X-SMG-Routing-Key": sid}
            ) as resp:
                out = await resp.json()
            text = tokenizer.decode(out["output_ids"], skip_special_tokens=False)
            message = parse_assistant(text, BASH).message
            messages.append(message)
            if not message.get("tool_calls"):
                texts.append(message["content"])
                return texts
            command = message["tool_calls"][0]["function"]["arguments"]["command"]
            ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
            assert ran.returncode == 0, ran.stderr
            messages.append({"role": "tool", "name": "Bash", "content": ran.stdout})
            texts.append(command)
    raise AssertionError("the replay policy never finished")


async def test_replay_applies_the_registered_patch(tmp_path, renderer, tokenizer):
    repo = make_repo(tmp_path)
    big = "".join(f"line {i} of a large generated file\n" for i in range(4000))  # > 1 chunk

    def edit():
        (repo / "app.py").write_text("def add(a, b):\n    return a + b\n")
        (repo / "data.txt").write_text(big)
        (repo / "odd name's.txt").write_text("quote ' and $HOME stay literal\n")

    patch = gold_patch(repo, edit)
    assert len(patch) * 4 / 3 > CHUNK
    server = PolicyServer(ReplayPolicy(), tokenizer)
    url = await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{url}/policy/sessions/task-1", json={"patch": patch, "workdir": str(repo)}
            ) as resp:
                assert resp.status == 200
            async with http.post(f"{url}/policy/sessions/task-2", json={"patch": 1}) as resp:
                assert resp.status == 400
        texts = await drive(url, renderer, tokenizer, "task-1")
        assert texts[-1] == DONE and len(texts) >= 4  # >= 2 chunks + apply + final answer
        assert (repo / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
        assert (repo / "data.txt").read_text() == big
        assert (repo / "odd name's.txt").read_text() == "quote ' and $HOME stay literal\n"
        git(repo, "add", "-N", ".")
        assert git(repo, "diff") == patch
        assert await drive(url, renderer, tokenizer, "unknown") == [NO_PATCH]
    finally:
        await server.stop()
