"""A realistic run directory, as ``coding-agent-rl run --out`` writes it, for the report tests.

Four rollouts over two instances (two GRPO groups): one solved with subagent / wipe / final
sibling samples, one model failure (context budget), one infra failure (aborted placeholder with
``abort_reason``), one graded and unsolved. Token ids come from the real tokenizer when one is
given (ChatML turns as the adapter renders them), else from a deterministic stand-in encoder.
The solved rollout's diff carries ``<script>`` and other HTML so escaping can be checked.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coding_agent_rl.types import Sample, Status, aborted_sample

SP = " "  # a blank context line in a diff
PWN = "<script>document.title='PWNED'</script>"
SYSTEM = (
    "You are Claude Code, an interactive CLI tool that helps users with software engineering tasks."
)

DIFF_SOLVED = f"""diff --git a/webkit/render.py b/webkit/render.py
index 3f2a1c0..8b9e4d2 100644
--- a/webkit/render.py
+++ b/webkit/render.py
@@ -1,9 +1,12 @@
+import html
+
 def render(title: str, body: str) -> str:
-    return "<h1>" + title + "</h1><p>" + body + "</p>"
+    # Escape user text: {PWN} must come out inert.
+    return "<h1>" + html.escape(title) + "</h1><p>" + html.escape(body) + "</p>"
{SP}
{SP}
 def render_list(items):
-    return "<ul>" + "".join("<li>%s</li>" % i for i in items) + "</ul>"
+    return "<ul>" + "".join("<li>%s</li>" % html.escape(i) for i in items) + "</ul>"
"""

DIFF_UNSOLVED = """diff --git a/strings/slug.py b/strings/slug.py
index 11aa22b..33cc44d 100644
--- a/strings/slug.py
+++ b/strings/slug.py
@@ -3,4 +3,4 @@ import re
 def slugify(text):
-    return re.sub(r"\\s+", "-", text)
+    return re.sub(r"\\s+", "-", text).lower()
"""

TASKS = {
    "demo__webkit-1": "render() does not escape HTML: a title like <b>x</b> is injected verbatim. "
    "Escape user text in render() and render_list().",
    "demo__strings-2": "slugify('Hello  World!') should return 'hello-world' (punctuation dropped).",
}

Encoder = Callable[[str], list[int]]


def stand_in_encoder(text: str) -> list[int]:
    """Deterministic ids for when no tokenizer is available: one id per word / symbol."""
    out = []
    word = ""
    for ch in text:
        if ch.isalnum():
            word += ch
            continue
        if word:
            out.append(1000 + sum(map(ord, word)) * 7 % 90000)
            word = ""
        out.append(ord(ch) % 1000)
    if word:
        out.append(1000 + sum(map(ord, word)) * 7 % 90000)
    return out


def _turns(
    task: str, turns: list[tuple[str, str]], prefix: str | None = None
) -> tuple[str, list[tuple[str, bool]]]:
    """A ChatML prompt and the response pieces (text, trained?) of ``turns`` (assistant, tool)."""
    user = prefix or f"Resolve the issue in the repository at /work/repo.\n\n{task}"
    prompt = (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    pieces: list[tuple[str, bool]] = []
    for i, (assistant, tool) in enumerate(turns):
        pieces.append((assistant + "<|im_end|>", True))
        if tool is not None:
            tail = "\n<|im_start|>assistant\n" if i + 1 < len(turns) else ""
            pieces.append(
                (
                    f"\n<|im_start|>user\n<tool_response>\n{tool}\n</tool_response><|im_end|>{tail}",
                    False,
                )
            )
    return prompt, pieces


def _sample(
    encode: Encoder,
    rng: random.Random,
    *,
    task: str,
    turns: list[tuple[str, str]],
    segment: str,
    segment_index: int,
    num_segments: int,
    rollout_id: str,
    group: int,
    index: int,
    instance: str,
    reward: float,
    status: Status = Status.COMPLETED,
    prefix: str | None = None,
) -> Sample:
    prompt, pieces = _turns(task, turns, prefix)
    tokens = encode(prompt)
    mask: list[int] = []
    lps: list[float] = []
    for text, trained in pieces:
        ids = encode(text)
        tokens += ids
        mask += [1 if trained else 0] * len(ids)
        lps += [-round(abs(rng.gauss(0, 0.7)), 4) if trained else 0.0 for _ in ids]
    sample = Sample(
        group_index=group,
        index=index,
        rollout_id=rollout_id,
        prompt=prompt,
        tokens=tokens,
        response="".join(t for t, _ in pieces),
        response_length=len(mask),
        loss_mask=mask,
        rollout_log_probs=lps,
        reward=reward,
        status=status,
        metadata={
            "instance_id": instance,
            "segment": segment,
            "segment_index": segment_index,
            "num_segments": num_segments,
            "turns": len(turns),
            "session_id": f"sess-{rollout_id}",
        },
    )
    sample.check()
    return sample


def _call(name: str, args: dict[str, Any]) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


def _timings(
    sandbox: float, install: float, agent: float, diff: float, grade: float
) -> dict[str, float]:
    parts = {
        "sandbox_s": sandbox,
        "install_s": install,
        "agent_s": agent,
        "diff_s": diff,
        "grade_s": grade,
    }
    return {**parts, "total_s": round(sum(parts.values()) + 0.12, 3)}


def write_fixture_run(
    run_dir: Path, encode: Encoder | None = None, tokenizer_spec: str = "qwen3"
) -> Path:
    """Write the run into ``run_dir`` (created); ``encode`` defaults to the stand-in encoder."""
    encode = encode or stand_in_encoder
    rng = random.Random(7)
    run_dir.mkdir(parents=True, exist_ok=True)
    samples: list[Sample] = []
    results: list[dict[str, Any]] = []

    # 1. solved, three siblings: a subagent branch, the pre-compaction chain, the final chain.
    inst, rid = "demo__webkit-1", "run1-0000"
    explore = [
        (
            "<think>\nFind every place that builds HTML by concatenation.\n</think>\n\n"
            + _call("Grep", {"pattern": "<h1>|<li>"}),
            'webkit/render.py:2:    return "<h1>" + title + "</h1><p>" + body + "</p>"\nwebkit/render.py:6: <li>',
        ),
        ("Both builders are in webkit/render.py: render() and render_list().", None),
    ]
    before_wipe = [
        (
            "<think>\nDelegate the search, then read the file.\n</think>\n\n"
            + _call("Task", {"prompt": "find HTML builders"}),
            "Both builders are in webkit/render.py: render() and render_list().",
        ),
        (
            _call("Read", {"file_path": "/work/repo/webkit/render.py"}),
            '1\tdef render(title: str, body: str) -> str:\n2\t    return "<h1>" + title + "</h1><p>" + body + "</p>"',
        ),
    ]
    final = [
        (
            "<think>\nUse html.escape on every user string.\n</think>\n\n"
            + _call(
                "Edit",
                {
                    "file_path": "webkit/render.py",
                    "old_string": "title +",
                    "new_string": "html.escape(title) +",
                },
            ),
            "The file webkit/render.py has been updated.",
        ),
        (
            _call("Bash", {"command": "python -m pytest -q tests/test_render.py"}),
            "7 passed in 0.05s",
        ),
        ("Escaped user text in render() and render_list(); all tests pass.", None),
    ]
    summary_prefix = "This session continues from a compacted conversation. Summary: the HTML builders are in webkit/render.py; they concatenate user text without escaping."
    for i, (seg, turns, prefix) in enumerate(
        [
            ("subagent", explore, "find HTML builders"),
            ("wipe", before_wipe, None),
            ("final", final, summary_prefix),
        ]
    ):
        samples.append(
            _sample(
                encode,
                rng,
                task=TASKS[inst],
                turns=turns,
                segment=seg,
                segment_index=i,
                num_segments=3,
                rollout_id=rid,
                group=0,
                index=0,
                instance=inst,
                reward=1.0,
                prefix=prefix,
            )
        )
    results.append(
        _result(
            rid,
            inst,
            0,
            0,
            reward=1.0,
            f2p=(2, 2),
            p2p=(5, 5),
            exit_code=0,
            segments=3,
            turns=7,
            timings=_timings(0.41, 0.62, 38.5, 0.08, 2.31),
            tests={
                **{f"tests/test_render.py::test_escape_{k}": "PASSED" for k in ("title", "items")},
                **{f"tests/test_render.py::test_plain_{k}": "PASSED" for k in range(5)},
            },
            diff=DIFF_SOLVED,
            samples=samples[-3:],
            run_dir=run_dir,
        )
    )

    # 2. model failure: the agent ran out of context budget mid-edit.
    rid = "run1-0001"
    turns = [
        (
            "<think>\nMaybe rewrite the whole module.\n</think>\n\n"
            + _call("Read", {"file_path": "webkit/render.py"}),
            "1\tdef render(title: str, body: str) -> str:",
        ),
        ("I will rewrite the module from scratch with a template engine and", None),
    ]
    samples.append(
        _sample(
            encode,
            rng,
            task=TASKS[inst],
            turns=turns,
            segment="final",
            segment_index=0,
            num_segments=1,
            rollout_id=rid,
            group=0,
            index=1,
            instance=inst,
            reward=0.0,
            status=Status.TRUNCATED,
        )
    )
    results.append(
        _result(
            rid,
            inst,
            1,
            0,
            reward=0.0,
            f2p=(0, 2),
            p2p=(5, 5),
            exit_code=1,
            segments=1,
            turns=2,
            timings=_timings(0.38, 0.59, 61.2, 0.07, 2.05),
            failure_kind="model",
            abort_reason="context budget exhausted (32768 tokens)",
            tests={
                "tests/test_render.py::test_escape_title": "FAILED",
                "tests/test_render.py::test_escape_items": "FAILED",
            },
            diff="",
            samples=samples[-1:],
            run_dir=run_dir,
            truncation="context_length",
            agent_log="[claude] error: prompt is too long: 32769 tokens > 32768 maximum\n",
        )
    )

    # 3. infra failure: the sandbox never came up; one aborted placeholder, no artifacts.
    inst, rid = "demo__strings-2", "run1-0002"
    base = Sample(group_index=1, index=2, rollout_id=rid, metadata={"instance_id": inst})
    samples.append(aborted_sample(base, "sandbox create timed out after 120 s", "infra"))
    results.append(
        _result(
            rid,
            inst,
            0,
            1,
            reward=0.0,
            f2p=(0, 0),
            p2p=(0, 0),
            exit_code=None,
            segments=1,
            turns=0,
            timings={"sandbox_s": 120.0, "total_s": 120.1},
            failure_kind="infra",
            abort_reason="sandbox create timed out after 120 s",
            tests={},
            diff=None,
            samples=samples[-1:],
            run_dir=run_dir,
        )
    )

    # 4. graded, unsolved: lower-cased but kept the punctuation.
    rid = "run1-0003"
    turns = [
        (
            _call(
                "Edit",
                {
                    "file_path": "strings/slug.py",
                    "old_string": "text)",
                    "new_string": "text).lower()",
                },
            ),
            "The file strings/slug.py has been updated.",
        ),
        ("Done: slugify now lower-cases.", None),
    ]
    samples.append(
        _sample(
            encode,
            rng,
            task=TASKS[inst],
            turns=turns,
            segment="final",
            segment_index=0,
            num_segments=1,
            rollout_id=rid,
            group=1,
            index=3,
            instance=inst,
            reward=0.0,
        )
    )
    results.append(
        _result(
            rid,
            inst,
            1,
            1,
            reward=0.0,
            f2p=(0, 1),
            p2p=(3, 3),
            exit_code=0,
            segments=1,
            turns=2,
            timings=_timings(0.44, 0.61, 12.7, 0.09, 1.88),
            tests={
                "tests/test_slug.py::test_punctuation": "FAILED",
                **{f"tests/test_slug.py::test_spaces_{k}": "PASSED" for k in range(3)},
            },
            diff=DIFF_UNSOLVED,
            samples=samples[-1:],
            run_dir=run_dir,
            extra={
                "fail_reason": "FAIL_TO_PASS: 1 of 1 still failing",
                "apply_method": "git-apply",
            },
        )
    )

    with (run_dir / "samples.jsonl").open("w") as f:
        for s in samples:
            f.write(json.dumps(s.to_dict()) + "\n")
    with (run_dir / "results.jsonl").open("w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    rewards = [r["reward"] for r in results]
    summary = {
        "run_id": "run1",
        "started_at": "2026-11-20T10:00:00Z",
        "finished_at": "2026-11-20T10:02:07Z",
        "agent": "claude_code",
        "sandbox": "docker",
        "policy": "replay",
        "dataset": "examples/demo.jsonl",
        "tokenizer": tokenizer_spec,
        "total": len(results),
        "solved": sum(1 for r in rewards if r >= 1.0),
        "mean_reward": sum(rewards) / len(rewards),
        "failures_by_kind": {"infra": 1, "model": 1},
        "timings_p50": _timings(0.42, 0.61, 38.5, 0.08, 2.05),
        "samples": len(samples),
        "tokens_trained": sum(sum(s.loss_mask or []) for s in samples),
        "wall_s": 127.4,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return run_dir


def _result(
    rid: str,
    inst: str,
    sample_index: int,
    group: int,
    *,
    reward: float,
    f2p: tuple[int, int],
    p2p: tuple[int, int],
    exit_code: int | None,
    segments: int,
    turns: int,
    timings: dict[str, float],
    tests: dict[str, str],
    diff: str | None,
    samples: list[Sample],
    run_dir: Path,
    failure_kind: str | None = None,
    abort_reason: str | None = None,
    truncation: str | None = None,
    agent_log: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    key = f"{inst}.s{sample_index}"
    rel = Path("rollouts") / key
    (run_dir / rel).mkdir(parents=True, exist_ok=True)
    artifacts: dict[str, str] = {}
    if diff is not None:
        (run_dir / rel / "diff.patch").write_text(diff)
        artifacts["diff"] = str(rel / "diff.patch")
        log = (
            agent_log
            or f"[claude] session sess-{rid} started\n[claude] tool Edit ok\n<done exit=0/>\n"
        )
        (run_dir / rel / "agent.log").write_text(log)
        artifacts["agent_log"] = str(rel / "agent.log")
        lines = [f"{t} {s}" for t, s in tests.items()]
        (run_dir / rel / "test_log.txt").write_text(
            "============ test session starts ============\n" + "\n".join(lines) + "\n"
        )
        artifacts["test_log"] = str(rel / "test_log.txt")
    return {
        "rollout_id": rid,
        "instance_id": inst,
        "sample_index": sample_index,
        "group_index": group,
        "agent": "claude_code",
        "reward": reward,
        "f2p_passed": f2p[0],
        "f2p_total": f2p[1],
        "p2p_passed": p2p[0],
        "p2p_total": p2p[1],
        "agent_exit_code": exit_code,
        "failure_kind": failure_kind,
        "abort_reason": abort_reason,
        "num_segments": segments,
        "turns": turns,
        "timings": timings,
        "tests": tests,
        "protected_paths_touched": [],
        "metrics": {
            "tokens_generated": sum(sum(s.loss_mask or []) for s in samples),
            "tokens_trained": sum(sum(s.loss_mask or []) for s in samples),
            "truncation_reason": truncation,
            "retries": 1 if failure_kind == "infra" else 0,
        },
        "artifacts": artifacts,
        **(extra or {}),
    }
