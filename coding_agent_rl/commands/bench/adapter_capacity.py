"""``coding-agent-rl bench adapter --sessions 64 --turns N``: one node's adapter capacity.

Concurrent Anthropic-format sessions grow turn by turn against the real adapter (``--processes``)
and a CPU policy server, alternating with a baseline that hits the policy server directly.
Method and what is reported: docs/modules/bench.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from typing import Any

CANNED_REPLY = (
    "I will look at the files first.\n<tool_call>\n"
    '{"name": "Bash", "arguments": {"command": "ls -la src && git status"}}\n</tool_call>'
)
SATURATED = 85.0  # % of one core: a single-threaded event loop is saturated from here
TASK = "Fix the failing test in tests/test_parser.py."


# -- the policy server and adapter processes --


def _canned_policy(tokenizer: Any) -> Any:
    from coding_agent_rl.policy.base import Completion, Policy, PolicyEnv, pseudo_logprob

    class Canned(Policy):
        """One pre-encoded tool call for every request: a policy that costs nothing."""

        name = "canned"

        def __init__(self, ids: list[int]):
            self.ids = ids
            self.logprobs = [pseudo_logprob(t, i) for i, t in enumerate(ids)]

        async def generate(self, request: Any, env: PolicyEnv) -> Completion:
            return Completion(self.ids, self.logprobs, {"type": "stop", "matched": self.ids[-1]})

    env = PolicyEnv(tokenizer)
    return Canned([*env.encode(CANNED_REPLY), env.end_id])


def scripted_policy_file(folder: str) -> str:
    """A script whose one rule answers every request with the same Bash call."""
    path = os.path.join(folder, "capacity-script.json")
    rule = {"match": ".", "tool": {"name": "Bash", "arguments": {"command": "ls -la src"}}}
    with open(path, "w") as f:
        json.dump({"rules": [rule]}, f)
    return path


def _serve_policy(spec: str, conn: Any) -> None:
    """Child process: the policy server; sends its URL, serves until killed."""
    from coding_agent_rl.policy import load_policy
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("qwen3")
    policy = _canned_policy(tokenizer) if spec == "canned" else load_policy(spec)
    server = PolicyServer(policy, tokenizer)

    async def main() -> None:
        conn.send(await server.start("127.0.0.1", 0))
        await asyncio.Event().wait()

    asyncio.run(main())


def _spawn(target: Any, *args: Any) -> tuple[Any, str]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(*args, child), daemon=True)
    proc.start()
    if not parent.poll(120):
        proc.kill()
        raise RuntimeError(f"{target.__name__} did not start within 120 s")
    return proc, parent.recv()


# -- CPU accounting from /proc --

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime, all threads


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / _TICK, sum(values) / _TICK


class CpuMeter:
    """Samples each named process's CPU time (and the machine's) every ``period`` seconds."""

    def __init__(self, pids: dict[str, int], period: float = 1.0):
        self.pids = pids
        self.period = period
        self.samples: list[tuple[float, dict[str, float], tuple[float, float]]] = []
        self._task: asyncio.Task[None] | None = None

    def _sample(self) -> None:
        cpu = {name: _cpu_s(pid) for name, pid in self.pids.items()}
        self.samples.append((time.monotonic(), cpu, _machine_busy()))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            self._sample()

    def start(self) -> None:
        self._sample()
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> dict[str, Any]:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._sample()
        (t0, c0, m0), (t1, c1, m1) = self.samples[0], self.samples[-1]
        wall = t1 - t0
        out: dict[str, Any] = {}
        for name in self.pids:
            peak = max(
                (b[1][name] - a[1][name]) / (b[0] - a[0])
                for a, b in zip(self.samples, self.samples[1:], strict=False)
            )
            out[name] = {
                "cpu_pct": round(100 * (c1[name] - c0[name]) / wall, 1),
                "cpu_pct_peak_1s": round(100 * peak, 1),
            }
        busy = (m1[0] - m0[0]) / max(m1[1] - m0[1], 1e-9)
        out["machine"] = {"busy_pct_of_all_cores": round(100 * busy, 1), "cores": os.cpu_count()}
        return out


# -- the sessions --


@dataclasses.dataclass
class Workload:
    system: str
    tools: list[dict[str, Any]]  # Anthropic tool definitions
    results: list[list[str]]  # per session, per turn: the tool result text


def build_workload(sessions: int, turns: int, system_tokens: int, seed: int) -> Workload:
    from coding_agent_rl.commands.bench.synthetic_session import source_file, system_prompt, tools
    from coding_agent_rl.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("qwen3")
    rng = random.Random(seed)

    def count(text: str) -> int:
        return len(tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids)

    system = system_prompt(rng, system_tokens, count)
    anthropic_tools = [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in tools(rng)
    ]
    results = [
        [source_file(rng, rng.randint(5, 60)) for _ in range(turns)] for _ in range(sessions)
    ]
    return Workload(system, anthropic_tools, results)


def _sse_content(text: str) -> list[dict[str, Any]]:
    """The content blocks of an Anthropic SSE reply."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    for chunk in text.split("\n\n"):
        data = next((ln[5:].strip() for ln in chunk.splitlines() if ln.startswith("data:")), "")
        if not data:
            continue
        event = json.loads(data)
        kind = event.get("type")
        if kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            delta, block = event["delta"], blocks[event["index"]]
            if delta["type"] == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif delta["type"] == "input_json_delta":
                partial.setdefault(event["index"], []).append(delta["partial_json"])
        elif kind == "error":
            raise RuntimeError(f"adapter stream error: {event['error']}")
    for index, parts in partial.items():
        blocks[index]["input"] = json.loads("".join(parts))
    return [blocks[i] for i in sorted(blocks)]


class AnthropicSession:
    """One agent's conversation: the request body is kept serialized per message, as it grows."""

    def __init__(self, sid: str, url: str, work: Workload, index: int, stream: bool):
        self.sid, self.url, self.index, self.stream = sid, url, index, stream
        self.results = work.results[index]
        head = {
            "model": "policy",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": work.system}],
            "tools": work.tools,
            "stream": stream,
        }
        self.head = json.dumps(head)[:-1].encode()  # without the closing brace
        first = {"role": "user", "content": f"{TASK} (session {index})"}
        self.messages: list[bytes] = [json.dumps(first).encode()]

    def body(self) -> bytes:
        return b"".join([self.head, b', "messages": [', b", ".join(self.messages), b"]}"])

    async def turn(self, http: Any, n: int) -> None:
        headers = {"x-api-key": self.sid, "anthropic-version": "2023-06-01"}
        headers["content-type"] = "application/json"
        async with http.post(f"{self.url}/v1/messages", data=self.body(), headers=headers) as r:
            text = await r.text()
            if r.status != 200:
                raise RuntimeError(f"adapter answered {r.status}: {text[:300]}")
        content = _sse_content(text) if self.stream else json.loads(text)["content"]
        calls = [b for b in content if b.get("type") == "tool_use"]
        if not calls:
            raise RuntimeError(f"turn {n} of session {self.index}: no tool call in {content}")
        self.messages.append(json.dumps({"role": "assistant", "content": content}).encode())
        results = [
            {"type": "tool_result", "tool_use_id": c["id"], "content": self.results[n]}
            for c in calls
        ]
        self.messages.append(json.dumps({"role": "user", "content": results}).encode())


class DirectSession:
    """The baseline: the same conversation as token ids straight to ``/generate``."""

    def __init__(self, sid: str, url: str, first: list[int], results: list[list[int]]):
        self.sid, self.url, self.ids, self.results = sid, url, list(first), results

    async def turn(self, http: Any, n: int) -> None:
        payload = {
            "input_ids": self.ids,
            "sampling_params": {"max_new_tokens": 1024, "skip_special_tokens": False},
            "return_logprob": True,
            "logprob_start_len": -1,
        }
        headers = {"X-SMG-Routing-Key": self.sid}
        async with http.post(f"{self.url}/generate", json=payload, headers=headers) as r:
            data = await r.json(content_type=None)
            if r.status != 200:
                raise RuntimeError(f"policy server answered {r.status}: {data}")
        self.ids += data["output_ids"] + self.results[n]


async def drive(sessions: list[Any], turns: int, pids: dict[str, int]) -> dict[str, Any]:
    """Every session's first turn (all at once: full renders of the first prompt), then the
    sustained phase, measured on its own: turns 2..N of every session, concurrently."""
    import aiohttp

    https = [
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=4), timeout=aiohttp.ClientTimeout(total=600)
        )
        for _ in sessions
    ]
    try:
        first = await _phase(sessions, https, range(1), pids)
        sustained = await _phase(sessions, https, range(1, turns), pids)
    finally:
        await asyncio.gather(*(http.close() for http in https))
    return {**sustained, "first_turns": first}


async def _phase(
    sessions: list[Any], https: list[Any], turns: range, pids: dict[str, int]
) -> dict[str, Any]:
    latencies: list[float] = []

    async def one(session: Any, http: Any) -> None:
        for n in turns:
            t0 = time.perf_counter()
            await session.turn(http, n)
            latencies.append(time.perf_counter() - t0)

    meter = CpuMeter({**pids, "clients": os.getpid()})
    meter.start()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(s, h) for s, h in zip(sessions, https, strict=True)))
    wall = time.perf_counter() - t0
    cpu = await meter.stop()
    done = len(latencies)
    for name, figures in cpu.items():
        if name != "machine":
            figures["cpu_ms_per_turn"] = round(10 * figures["cpu_pct"] * wall / done, 2)
    values = sorted(latencies)
    return {
        "turns": done,
        "wall_s": round(wall, 2),
        "turns_per_s": round(done / wall, 1),
        "turn_ms_p50": round(1000 * statistics.median(values), 1),
        "turn_ms_p99": round(1000 * values[min(done - 1, int(0.99 * done))], 1),
        "cpu": cpu,
    }


def saturation(cpu: dict[str, Any]) -> str:
    """Which side runs out first: a process at >= SATURATED % of a core, else the machine."""
    hot = [
        name
        for name, figures in cpu.items()
        if name != "machine" and figures["cpu_pct"] >= SATURATED
    ]
    if hot:
        return ", ".join(sorted(hot))
    if cpu["machine"]["busy_pct_of_all_cores"] >= 90.0:
        return "machine (all cores busy, no single process saturated)"
    return "none"


def _direct_sessions(url: str, work: Workload, sessions: int) -> list[DirectSession]:
    from coding_agent_rl.model.render import Renderer
    from coding_agent_rl.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("qwen3")
    renderer = Renderer(tokenizer)
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
            },
        }
        for t in work.tools
    ]
    base = renderer.render(
        [{"role": "system", "content": work.system}, {"role": "user", "content": TASK}], tools
    )

    def wrap(text: str) -> list[int]:
        msg = f"<|im_start|>user\n<tool_response>\n{text}\n</tool_response><|im_end|>\n"
        return list(tokenizer.encode(msg + "<|im_start|>assistant\n", add_special_tokens=False))

    return [
        DirectSession(f"direct-{i}", url, base, [wrap(r) for r in work.results[i]])
        for i in range(sessions)
    ]


def median_of(results: list[Any]) -> Any:
    """Per-field medians of same-shaped results (numbers at the leaves; other leaves: the
    first's)."""
    first = results[0]
    if isinstance(first, dict):
        return {k: median_of([r[k] for r in results]) for k in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return round(statistics.median(results), 2)
    return first


async def _adapter_round(
    pool: Any, work: Workload, sessions: int, turns: int, policy_pid: int
) -> dict[str, Any]:
    from coding_agent_rl.adapter.sessions import new_session_id

    clients = []
    for i in range(sessions):
        sid = new_session_id("bench-")
        url = await pool.open(sid)
        clients.append(AnthropicSession(sid, url, work, i, stream=i % 2 == 0))
    pids = {f"adapter_{n}": pid for n, pid in enumerate(pool.pids())}
    result = await drive(clients, turns, {**pids, "policy": policy_pid})
    recorded = [await pool.turns(c.sid) for c in clients]
    result["recorded_turns"] = sum(len(r) for r in recorded)
    result["max_context_tokens"] = max(
        len(t.prompt_ids) + len(t.output_ids) for r in recorded for t in r
    )
    for c in clients:
        pool.sessions.close(c.sid)
        pool.sessions.pop(c.sid)
    return result


async def measure(
    *,
    sessions: int,
    turns: int,
    processes: int,
    policy: str,
    system_tokens: int,
    seed: int,
    baseline: bool = True,
    rounds: int = 2,
) -> dict[str, Any]:
    """``rounds`` rounds of the adapter run and (``baseline``) the direct run, alternating which
    goes first, against one policy server and one adapter pool; medians over the rounds."""
    from coding_agent_rl.adapter.pool import AdapterPool

    work = build_workload(sessions, turns, system_tokens, seed)
    result: dict[str, Any] = {
        "bench": "adapter-capacity",
        "sessions": sessions,
        "turns_per_session": turns,
        "processes": processes,
        "policy": policy,
        "system_tokens": system_tokens,
        "streaming_sessions": (sessions + 1) // 2,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    per_round: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="carl-capacity-") as folder:
        spec = f"scripted:{scripted_policy_file(folder)}" if policy == "scripted" else "canned"
        policy_proc, policy_url = _spawn(_serve_policy, spec)
        pool = AdapterPool(processes, sglang_url=policy_url)
        try:
            await pool.start()
            for n in range(rounds):
                this: dict[str, Any] = {}
                order = ["direct", "adapter"] if n % 2 == 0 else ["adapter", "direct"]
                for side in order:
                    if side == "adapter":
                        this["adapter"] = await _adapter_round(
                            pool, work, sessions, turns, policy_proc.pid
                        )
                    elif baseline:
                        direct = _direct_sessions(policy_url, work, sessions)
                        this["direct"] = await drive(direct, turns, {"policy": policy_proc.pid})
                if baseline:
                    this["ratio_vs_direct"] = round(
                        this["adapter"]["turns_per_s"] / this["direct"]["turns_per_s"], 3
                    )
                per_round.append(this)
        finally:
            await pool.stop()
            policy_proc.kill()
            policy_proc.join(10)
    adapter = median_of([r["adapter"] for r in per_round])
    result["adapter"] = adapter
    result["recorded_turns"] = sum(r["adapter"]["recorded_turns"] for r in per_round)
    result["saturated"] = saturation(adapter["cpu"])
    adapter_ms = sum(v["cpu_ms_per_turn"] for k, v in adapter["cpu"].items() if k[:8] == "adapter_")
    result["adapter_cpu_ms_per_turn"] = round(adapter_ms, 2)
    # Modelled: turns/s one adapter process reaches with a whole core to itself at this context.
    result["one_core_ceiling_turns_per_s"] = round(1000 / adapter_ms, 1) if adapter_ms else None
    if baseline:
        result["direct"] = median_of([r["direct"] for r in per_round])
        result["ratio_vs_direct"] = median_of([r["ratio_vs_direct"] for r in per_round])
        result["baseline"] = {
            "kind": "run",
            "from": "the same sessions as /generate token ids straight to the same policy "
            "server, no adapter, same process, alternating with ours round by round",
        }
    else:
        result["baseline"] = {"kind": "none", "from": "--no-baseline: no direct run"}
    result["rounds"] = per_round
    result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    return result
