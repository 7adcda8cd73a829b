"""``coding-agent-rl bench faults``: a small real batch per fault class, the fault injected
mid-batch, and what it cost (docs/faults.md has the table of faults).

Each batch: the bundled example tasks, the real Claude Code CLI in Docker sandboxes, a scripted
policy that solves every task (through the agent's shell tool) behind a real
:class:`~coding_agent_rl.policy.server.PolicyServer`, real grading, the real ``run_batch`` and
``RunWriter``. The injections (``FAULTS``):

- ``policy_503``: a real HTTP front on the policy server answers ``/generate`` with 503 (as
  during a weight update) from the moment every rollout in flight has had a turn, until every
  session open then has ended: longer than the client's backoff;
- ``adapter_kill``: two adapter processes; the one serving the most open sessions is SIGKILLed
  once each rollout in flight has had a turn.

Figures per fault: rollouts in flight when injected; rows lost (no final record), duplicates (a
row with more than one record), misattributed (a row whose record blames the model: the policy
solves every task, so any model failure is a fault scored as the model's), torn lines in
``results.jsonl`` / ``samples.jsonl``, leftovers (labelled containers, adapter processes), and
``recovery_s``: seconds from the fault to the first rollout completed after it (reported). Every
count has the target 0 (baseline: ``modelled``: a fault-free batch loses, duplicates and
misattributes nothing). The tests in ``tests/faults/`` run the same injections.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import multiprocessing
import os
import pathlib
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl.commands.bench import (
    Target,
    add_check_argument,
    missed_targets,
    report,
    target_table,
)
from coding_agent_rl.sandbox.docker_engine import LABEL_RUN

COUNTS = ("rows_lost", "duplicates", "misattributed", "torn_lines", "leftovers")
TARGETS: dict[str, Target] = {name: ("==", 0.0) for name in COUNTS}
# Claude Code retries a failing API call 10 times (~150 s): the batch relies on the rollout's
# budget there; one retry lets a fault show within seconds.
FAST_FAIL_HARNESS: dict[str, Any] = {
    "extra_env": {"CLAUDE_CODE_MAX_RETRIES": "1"},
    "extra_args": [],
}
BREAKS = ("drop-row",)  # paths broken on purpose, for the bench's own test


# ---- the policy, behind a front -----------------------------------------------------------------


def solve_script(rows: list[Any]) -> dict[str, Any]:
    """A scripted policy solving every row with its gold patch through the shell tool."""
    import re

    from coding_agent_rl.policy.replay import patch_commands

    rules = []
    for row in rows:
        steps: list[dict[str, Any]] = [{"shell": c} for c in patch_commands(row.patch, row.workdir)]
        first = row.problem_statement.strip().splitlines()[0]
        rules.append(
            {"match_prompt": re.escape(first), "steps": [*steps, {"say": "I fixed the bug."}]}
        )
    return {"rules": rules, "final": "Done."}


class PolicyFront:
    """A real HTTP front on ``upstream`` (the policy server): forwards every route; while
    ``unavailable``, ``/generate`` answers 503, as a server does while its weights change."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.unavailable = False
        self.served: collections.Counter[str] = collections.Counter()  # routing key -> replies
        self.refused = 0
        self._runner: Any = None
        self._http: Any = None

    async def start(self) -> str:
        import aiohttp
        from aiohttp import web

        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()

    async def _forward(self, request: Any) -> Any:
        from aiohttp import web

        from coding_agent_rl.model.sglang import ROUTING_HEADER

        body = await request.read()
        if request.path == "/generate" and self.unavailable:
            self.refused += 1
            return web.json_response(
                {"error": {"message": "the weights are being updated"}}, status=503
            )
        keep = ("content-type", ROUTING_HEADER.lower())
        headers = {k: v for k, v in request.headers.items() if k.lower() in keep}
        url = self.upstream + request.path_qs
        async with self._http.request(request.method, url, data=body, headers=headers) as resp:
            data = await resp.read()
            if request.path == "/generate" and resp.status == 200:
                self.served[request.headers.get(ROUTING_HEADER, "")] += 1
            return web.Response(
                status=resp.status, body=data, content_type=resp.content_type or None
            )


# ---- the batch ---------------------------------------------------------------------------------


def _executor_class() -> type:
    from coding_agent_rl.rollout.executor import InProcessExecutor

    class WatchedExecutor(InProcessExecutor):
        """In process, counting the rollouts in flight and when each one ended."""

        def __init__(self, config: Any, *, concurrency: int = 4):
            super().__init__(config, concurrency=concurrency)
            self.running = 0
            self.ended: list[float] = []

        async def run(self, row: Any, sample: Any, **kw: Any) -> Any:
            runner = self.runtime.runner
            assert runner is not None, "start() the executor first"
            async with self._sem:
                self.running += 1
                try:
                    return await runner.run(row, sample, **kw)
                finally:
                    self.running -= 1
                    self.ended.append(time.monotonic())

    return WatchedExecutor


@dataclasses.dataclass
class Batch:
    """What an injection sees: the executor (its runtime), the front, the run's label."""

    executor: Any
    front: PolicyFront
    run_id: str
    events: dict[str, Any] = dataclasses.field(default_factory=dict)


async def poll(predicate: Callable[[], bool], give_up_s: float, what: str) -> None:
    """Wait for ``predicate`` (checked every 0.1 s); ``give_up_s`` is a give-up point for a
    phase that never comes, not a bound on the code."""
    deadline = time.monotonic() + give_up_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        await asyncio.sleep(0.1)


def open_sessions(batch: Batch) -> list[str]:
    """The sessions open now that have had at least one model reply."""
    adapter = batch.executor.runtime.adapter
    return [k for k in list(batch.front.served) if k in adapter.sessions]


async def every_rollout_had_a_turn(batch: Batch) -> None:
    """Until each rollout in flight has had a model reply (none is still starting)."""
    await poll(
        lambda: batch.executor.running > 0 and len(open_sessions(batch)) >= batch.executor.running,
        600,
        "a turn in every rollout in flight",
    )


async def inject_policy_503(batch: Batch) -> None:
    """503 on ``/generate`` from a moment every rollout in flight has had a turn until every
    session open then has ended (each gave up: longer than any client backoff)."""
    await every_rollout_had_a_turn(batch)
    hit = open_sessions(batch)
    batch.events.update(in_flight=batch.executor.running, fault_at=time.monotonic(), hit=hit)
    batch.front.unavailable = True
    adapter = batch.executor.runtime.adapter
    try:
        await poll(lambda: not any(s in adapter.sessions for s in hit), 900, "the sessions to end")
    finally:
        batch.front.unavailable = False
    batch.events.update(window_s=time.monotonic() - batch.events["fault_at"])


def adapter_processes() -> list[Any]:
    """This process's adapter pool children still alive."""
    return [p for p in multiprocessing.active_children() if p.name == "coding-agent-rl-adapter"]


async def inject_adapter_kill(batch: Batch) -> None:
    """SIGKILL the adapter process serving the most open sessions, once every rollout in flight
    has had a turn."""
    await every_rollout_had_a_turn(batch)
    pool = batch.executor.runtime.adapter
    owners = collections.Counter(pool._owner[s] for s in open_sessions(batch) if s in pool._owner)
    child, sessions = owners.most_common(1)[0]
    batch.events.update(
        in_flight=batch.executor.running,
        fault_at=time.monotonic(),
        killed_pid=child.process.pid,
        killed_sessions=sessions,
    )
    os.kill(child.process.pid, signal.SIGKILL)


@dataclasses.dataclass(frozen=True)
class Fault:
    inject: Callable[[Batch], Awaitable[None]]
    runtime: dict[str, Any]  # RuntimeConfig fields


FAULTS: dict[str, Fault] = {
    "policy_503": Fault(inject_policy_503, {}),
    "adapter_kill": Fault(inject_adapter_kill, {"adapter_processes": 2}),
}


@dataclasses.dataclass
class Outcome:
    """One fault's batch: its figures (``figures``), records, events and the folder."""

    fault: str
    figures: dict[str, Any]
    records: list[dict[str, Any]]
    events: dict[str, Any]
    out: pathlib.Path
    front: PolicyFront


class _DroppingWriter:
    """``drop-row``: a writer that loses the first record after the fault (a broken path)."""

    def __init__(self, writer: Any, events: dict[str, Any]):
        self._writer, self._events, self.dropped = writer, events, 0

    def add(self, samples: Any, record: dict[str, Any]) -> None:
        if "fault_at" in self._events and not self.dropped:
            self.dropped += 1
            return
        self._writer.add(samples, record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


async def run_fault(
    fault: str,
    rows: list[Any],
    out: pathlib.Path,
    *,
    concurrency: int = 2,
    breaks: str | None = None,
    run_id: str | None = None,
) -> Outcome:
    """Run ``rows`` as one batch with ``fault`` injected; audit what it left."""
    from coding_agent_rl.policy.scripted import ScriptedPolicy
    from coding_agent_rl.policy.server import PolicyServer
    from coding_agent_rl.rollout.batch import run_batch
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.outputs import RunWriter
    from coding_agent_rl.rollout.runtime import RuntimeConfig
    from coding_agent_rl.tokenizer import load_tokenizer

    spec = FAULTS[fault]
    run_id = run_id or f"bench-faults-{uuid.uuid4().hex[:8]}"
    server = PolicyServer(ScriptedPolicy(solve_script(rows)), load_tokenizer("qwen3"), "qwen25")
    front = PolicyFront(await server.start("127.0.0.1", 0))
    url = await front.start()
    rollout = RolloutConfig(
        agent_budget_s=180.0,
        eval_timeout_s=60.0,
        infra_retries=1,
        max_context=32768,
        out_dir=out,
        sandbox_options={"run_id": run_id},
    )
    config = RuntimeConfig(
        sglang_url=url, rollout=rollout, harness_options=FAST_FAIL_HARNESS, **spec.runtime
    )
    executor = _executor_class()(config, concurrency=concurrency)
    batch = Batch(executor, front, run_id)
    writer: Any = RunWriter(out)
    if breaks == "drop-row":
        writer = _DroppingWriter(writer, batch.events)
    injection = asyncio.ensure_future(spec.inject(batch))
    try:
        await run_batch(rows, config, writer, executor=executor)
    finally:
        if not injection.done():
            injection.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await injection
        await front.stop()
        await server.stop()
    figures = audit(rows, out, run_id, batch.events, executor.ended)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return Outcome(fault, figures, records, batch.events, out, front)


def containers(run_id: str) -> list[str]:
    r = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL_RUN}={run_id}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout.split()


def _lines(path: pathlib.Path) -> tuple[list[dict[str, Any]], int]:
    """(the parsed lines, how many are torn: unparsable, or a last line with no newline)."""
    text = path.read_text() if path.exists() else ""
    parsed, torn = [], 0
    for line in text.splitlines():
        try:
            parsed.append(json.loads(line))
        except ValueError:
            torn += 1
    if text and not text.endswith("\n"):
        torn += 1
    return parsed, torn


def audit(
    rows: list[Any],
    out: pathlib.Path,
    run_id: str,
    events: dict[str, Any],
    ended: list[float],
) -> dict[str, Any]:
    """The batch's figures from what it left on disk and on the host."""
    records, torn = _lines(out / "results.jsonl")
    samples, torn_samples = _lines(out / "samples.jsonl")
    per_row = collections.Counter(r["instance_id"] for r in records)
    expected = {row.instance_id for row in rows}
    left = containers(run_id)
    procs = adapter_processes()
    fault_at = events.get("fault_at")
    after = [t - fault_at for t in ended if fault_at is not None and t > fault_at]
    trained_infra = [
        s
        for s in samples
        if s.get("metadata", {}).get("failure_kind") == "infra" and not s.get("remove_sample")
    ]
    return {
        "in_flight": events.get("in_flight"),
        "rows_lost": len(expected - set(per_row)),
        "duplicates": sum(n - 1 for n in per_row.values() if n > 1),
        # the policy solves every task: a model failure is a fault scored as the model's, and an
        # infra sample kept for training is one too
        "misattributed": sum(r.get("failure_kind") == "model" for r in records)
        + len(trained_infra),
        "torn_lines": torn + torn_samples,
        "leftovers": len(left) + len(procs),
        "solved": sum(r.get("reward") == 1.0 for r in records),
        "infra": sum(r.get("failure_kind") == "infra" for r in records),
        "recovery_s": round(min(after), 2) if after else None,
    }


# ---- the command --------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}"
    )
    parser.add_argument("--rows", type=int, default=3, help="example tasks per batch")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument(
        "--break",
        dest="breaks",
        choices=BREAKS,
        help="a path broken on purpose (drop-row: a record after the fault is not written)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.commands.bench.rollout import TASKS
    from coding_agent_rl.datasets.schema import load_dataset
    from coding_agent_rl.errors import UserError
    from coding_agent_rl.images.dataset import build_dataset_images

    names = [f for f in args.faults.split(",") if f]
    unknown = [f for f in names if f not in FAULTS]
    if unknown or not names:
        raise UserError(f"--faults: unknown {unknown or names}; known: {', '.join(FAULTS)}")
    if args.rows < 1 or args.concurrency < 1:
        raise UserError("--rows and --concurrency must be at least 1")
    build_dataset_images(TASKS)
    rows = list(load_dataset(TASKS))[: args.rows]
    table: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        for name in names:
            outcome = asyncio.run(
                run_fault(
                    name,
                    rows,
                    pathlib.Path(tmp) / name,
                    concurrency=args.concurrency,
                    breaks=args.breaks,
                )
            )
            table[name] = outcome.figures
    result: dict[str, Any] = {
        "benchmark": "faults",
        "rows": args.rows,
        "concurrency": args.concurrency,
        "load": round(os.getloadavg()[0], 1),
        "break": args.breaks,
        "baseline": {
            "kind": "modelled",
            "from": "a fault-free batch: every row one record, nothing left behind",
        },
        "faults": table,
        "targets": {f"{n}.{k}": v for n in table for k, v in target_table(TARGETS).items()},
    }
    result["targets_missed"] = [
        f"{n}.{m}" for n, figures in table.items() for m in missed_targets(figures, TARGETS)
    ]
    if not getattr(args, "json", False):
        print_table(table)
    return report("faults", result, args)


def print_table(table: dict[str, dict[str, Any]]) -> None:
    cols = ("in_flight", *COUNTS, "solved", "infra", "recovery_s")
    print(f"{'fault':14}" + "".join(f"{c:>15}" for c in cols))
    for name, figures in table.items():
        print(f"{name:14}" + "".join(f"{figures.get(c)!s:>15}" for c in cols))
