"""A coding environment without an agent CLI: the policy's tool calls run in the task's sandbox.

Per episode: a fresh sandbox from the task's image (any backend, network off: nothing inside
needs it), the workspace prepared and scrubbed exactly as for CLI rollouts
(:func:`~coding_agent_rl.grading.workspace.prepare_workspace` with ``agent=True``: no future
commits, hidden paths removed), the repository handed to the unprivileged agent user
(``harness/agent_user.py``). Tools (``tools.py``): ``bash``, ``file_editor``, ``submit``. The
model's output is parsed with the configured tool-call parser; an ill-formed or unknown call is
answered as an observation (the turn is used). ``submit`` -- or a reply without a tool call, as an
agent CLI ends its run (``on_no_tool_call="submit"``; ``"nudge"`` asks for a tool call instead)
-- ends the episode. Images: a row's ``metadata.problem_images`` (paths in the
repository, e.g. a screenshot of the bug, as SWE-bench Multimodal rows carry) are shown after
the task text, read from the prepared workspace; ``file_editor view`` of an image file answers
with the image (``multi_modal_data`` + image parts in the tool message). :meth:`CodingEnv.evaluate` then captures the diff and grades it with the same
clean-sandbox grader as CLI rollouts (a grading sandbox is prepared ahead while the policy works).

``build_env(sample=..., args=...)`` makes this module usable as slime's
``rollout_interaction_env_path: coding_agent_rl.env.coding`` (a key of the ``--custom-config-path`` YAML).
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import time
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.env.base import BaseInteractionEnv, EnvOutcome, FatalEnvError
from coding_agent_rl.env.editor import run_editor
from coding_agent_rl.env.tools import (
    STAGING_DIR,
    TOOLS,
    ToolLimits,
    ToolResult,
    Workspace,
    error,
    run_bash,
)
from coding_agent_rl.grading.diff import DiffCaptureError, capture_diff
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.prepared import GradingSandbox, sandbox_options_for
from coding_agent_rl.grading.workspace import prepare_workspace
from coding_agent_rl.harness.agent_user import agent_user_script, default_home
from coding_agent_rl.model.parsers import parse_assistant
from coding_agent_rl.model.parsers.xml_calls import convert
from coding_agent_rl.sandbox import BACKENDS, Sandbox, SandboxError, SandboxGone, create_sandbox
from coding_agent_rl.settings import default

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a software engineering agent working in a Linux sandbox. Act only through the "
    "tools: run shell commands with `bash`, read and change files with `file_editor`, and call "
    "`submit` when you are done. Your uncommitted changes to the repository are evaluated."
)
NUDGE = "No tool call found. Use bash or file_editor, or call submit when you are done."
NO_TOOL_CALL = ("submit", "nudge")


@dataclasses.dataclass
class CodingEnvConfig:
    backend: str = default("sandbox")
    sandbox_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    tool_parser: str = default("tool_parser")
    reasoning_parser: str | None = default("reasoning_parser")
    user: str = "agent"
    limits: ToolLimits = dataclasses.field(default_factory=ToolLimits)
    on_no_tool_call: str = "submit"
    eval_timeout_s: float = default("eval_timeout_s")
    grade_ahead: bool = True  # prepare the grading sandbox while the policy works
    system_prompt: str = SYSTEM_PROMPT
    max_calls_per_turn: int = 16  # further calls in one reply are answered with an error

    def __post_init__(self) -> None:
        if self.on_no_tool_call not in NO_TOOL_CALL:
            raise ValueError(f"on_no_tool_call must be one of {NO_TOOL_CALL}")


class CodingEnv(BaseInteractionEnv):
    """One task (a :class:`~coding_agent_rl.datasets.schema.TaskRow`) in a sandbox.

    ``prompt``: the task text of the user message; ``files``: files written into the sandbox
    after the workspace is prepared (e.g. the problem statement), never part of the diff.
    """

    tools = TOOLS

    def __init__(
        self,
        row: Any,
        config: CodingEnvConfig | None = None,
        *,
        prompt: str,
        files: dict[str, str] | None = None,
    ):
        self.row = row
        self.config = config or CodingEnvConfig()
        self.prompt = prompt
        self.files = dict(files or {})
        self.sb: Sandbox | None = None
        self.ahead: GradingSandbox | None = None
        self.base: str | None = None
        self.ws: Workspace | None = None
        self.timings: dict[str, float] = {}
        self.transcript: list[tuple[str, str]] = []  # (action, observation), uncut
        self.diff_text: str | None = None
        self.test_log: str | None = None

    # ---- reset -----------------------------------------------------------------------------------
    async def reset(self) -> tuple[dict[str, Any], dict[str, Any]]:
        t0 = time.monotonic()
        cfg, row = self.config, self.row
        await self._close_agent_sandbox()
        try:
            if cfg.grade_ahead and self.ahead is None:
                self.ahead = GradingSandbox(
                    row, backend=cfg.backend, sandbox_options=cfg.sandbox_options
                )
                await self.ahead.__aenter__()
                self.ahead.start()
            sb = create_sandbox(
                cfg.backend, row.image, **sandbox_options_for(cfg.backend, cfg.sandbox_options, row)
            )
            await sb.__aenter__()
            self.sb = sb
            self.base = await prepare_workspace(sb, row, agent=True, files=self.files)
            home = default_home(cfg.user)
            setup = agent_user_script(cfg.user, home, row.workdir)
            setup += f"mkdir -p {STAGING_DIR} && chmod 755 {STAGING_DIR}\n"
            await sb.exec(setup, check=True, timeout=300)
        except Exception as e:  # sandbox or task set-up: not the model's; the runner retries
            raise FatalEnvError(f"{type(e).__name__}: {e}") from e
        self.ws = Workspace(sb, cfg.user, home, row.workdir, cfg.limits)
        self.timings["sandbox_s"] = time.monotonic() - t0
        messages = [
            {"role": "system", "content": cfg.system_prompt},
            {"role": "user", "content": await self._task_content(sb)},
        ]
        return {"messages": messages, "tools": TOOLS}, {"base_commit": self.base}

    async def _task_content(self, sb: Sandbox) -> Any:
        """The task text, then the row's ``problem_images`` read from the prepared workspace."""
        paths = self.row.metadata.get("problem_images") or []
        if not paths:
            return self.prompt
        parts: list[dict[str, Any]] = [{"type": "text", "text": self.prompt}]
        for rel in paths:
            path = posixpath.normpath(posixpath.join(self.row.workdir, str(rel)))
            try:
                data = await sb.read_file(path, binary=True)
            except Exception as e:  # the row names a file its image does not have: data
                raise FatalEnvError(f"problem image {rel}: {type(e).__name__}: {e}") from e
            parts.append(
                {"type": "image", "image": data if isinstance(data, bytes) else data.encode()}
            )
        return parts

    # ---- step --------------------------------------------------------------------------------------
    async def step(self, response_text: str) -> tuple[dict[str, Any], bool, dict[str, Any]]:
        parsed = parse_assistant(
            response_text,
            None,  # any name: an unknown tool gets an error, not silence
            tool_parser=self.config.tool_parser,
            reasoning_parser=self.config.reasoning_parser,
        )
        calls = parsed.message.get("tool_calls") or []
        if parsed.errors:
            text = "Error: ill-formed tool call: " + "; ".join(parsed.errors)
            return self._note(response_text, text, False, {"ill_formed": True})
        if not calls:
            if self.config.on_no_tool_call == "submit":
                return self._note(response_text, "", True, {"tools": [], "submitted": False})
            return self._note(response_text, NUDGE, False, {"tools": []})
        results: list[dict[str, Any]] = []
        names: list[str] = []
        done = False
        for n, call in enumerate(calls):
            fn = call.get("function", call)
            name, args = fn.get("name"), fn.get("arguments") or {}
            names.append(str(name))
            if n >= self.config.max_calls_per_turn:
                limit = self.config.max_calls_per_turn
                text = f"Error: not run: at most {limit} tool calls per reply"
                results.append({"name": str(name), "content": text})
                continue
            if name == "submit":
                results.append({"name": "submit", "content": "Submitted."})
                done = True
                break
            result = await self._run_tool(str(name), _typed(str(name), args))
            results.append({"name": str(name), "content": result.text, "images": result.images})
        obs: dict[str, Any] = {
            "obs_str": "\n\n".join(r["content"] for r in results),
            "tool_results": results,
        }
        shown = [image for r in results for image in r.get("images") or []]
        if shown:  # slime's shape; format_observation puts them in their tool messages
            obs["multi_modal_data"] = {"image": shown}
        self.transcript.append((response_text, obs["obs_str"]))
        return obs, done, {"tools": names, "submitted": done}

    def _note(
        self, action: str, text: str, done: bool, info: dict[str, Any]
    ) -> tuple[dict[str, Any], bool, dict[str, Any]]:
        self.transcript.append((action, text))
        return {"obs_str": text}, done, info

    async def _run_tool(self, name: str, args: Any) -> ToolResult:
        if self.ws is None:
            raise FatalEnvError("step() before reset()")
        if not isinstance(args, dict):
            return error(f"{name}: arguments must be a JSON object")
        try:
            if name == "bash":
                return await run_bash(self.ws, args)
            if name == "file_editor":
                return await run_editor(self.ws, args)
        except SandboxGone as e:
            raise FatalEnvError(f"sandbox gone: {e}") from e
        except SandboxError as e:  # the command may have run: a retry could run it twice
            raise FatalEnvError(f"{type(e).__name__}: {e}") from e
        known = ", ".join(t["function"]["name"] for t in TOOLS)
        return error(f"unknown tool {name!r}; the tools are {known}")

    def format_observation(self, observation: dict[str, Any] | None) -> Any:
        """Tool results as ``tool`` messages (one turn); anything else as a user message."""
        observation = observation or {}
        results = observation.get("tool_results")
        if results:
            return [{"role": "tool", "name": r["name"], "content": _content(r)} for r in results]
        return {"role": "user", "content": str(observation.get("obs_str", ""))}

    # ---- the end -----------------------------------------------------------------------------------
    async def evaluate(self) -> EnvOutcome:
        """Capture the diff and grade it in a clean sandbox (only the diff crosses over)."""
        cfg, row = self.config, self.row
        if self.sb is None or self.base is None:
            return EnvOutcome(None, "infra", "evaluate() before a successful reset()")
        t0 = time.monotonic()
        try:
            diff = await capture_diff(self.sb, row.workdir, base_commit=self.base)
        except DiffCaptureError as e:  # e.g. the policy deleted .git: its own doing
            return EnvOutcome(0.0, "model", f"diff: {e}")
        except SandboxError as e:
            return EnvOutcome(None, "infra", f"diff: {type(e).__name__}: {e}")
        finally:
            self.timings["diff_s"] = time.monotonic() - t0
        await self._close_agent_sandbox()
        self.diff_text = diff.text
        t1 = time.monotonic()
        result = await grade(
            row,
            diff.text,
            backend=cfg.backend,
            sandbox_options=cfg.sandbox_options,
            timeout=cfg.eval_timeout_s,
            sandbox=self.ahead,
        )
        self.timings["grade_s"] = time.monotonic() - t1
        self.test_log = result.test_log
        record = {**result.record_fields(), "diff_truncated": diff.truncated_reason}
        kind = result.failure_kind if result.reward < 1.0 else None
        return EnvOutcome(result.reward, kind, result.reason, record)

    async def _close_agent_sandbox(self) -> None:
        sb, self.sb, self.ws = self.sb, None, None
        if sb is not None:
            await sb.close()

    async def close(self) -> None:
        await self._close_agent_sandbox()
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            await ahead.close()


def _content(result: dict[str, Any]) -> Any:
    """A tool message's content: its text, then its images as image parts."""
    images = result.get("images") or []
    if not images:
        return result["content"]
    return [
        {"type": "text", "text": result["content"]},
        *({"type": "image", "image": image} for image in images),
    ]


def _typed(name: str, args: Any) -> Any:
    """String values typed with the tool's schema. Calls are parsed without the tool list (so an
    unknown tool is answered, not dropped as text), which leaves Qwen3-Coder's XML values as
    strings: ``insert_line`` "3" becomes 3, as the parser would type it."""
    spec = next((t["function"] for t in TOOLS if t["function"]["name"] == name), None)
    if spec is None or not isinstance(args, dict):
        return args
    props = spec["parameters"].get("properties") or {}
    return {
        k: convert(v, props.get(k)) if isinstance(v, str) and k in props else v
        for k, v in args.items()
    }


def build_env(sample: Any = None, args: Any = None, **_: Any) -> CodingEnv:
    """slime's hook (``rollout_interaction_env_path: coding_agent_rl.env.coding`` (a key of the ``--custom-config-path`` YAML)): the coding
    env for a sample made from one of our dataset rows. Backend: ``settings.sandbox``
    (docker); parsers: slime's ``sglang_tool_call_parser`` / ``sglang_reasoning_parser``."""
    from coding_agent_rl.datasets.prompt import PROBLEM_FILE, render_prompt
    from coding_agent_rl.datasets.schema import row_from_sample

    conf = settings.current()
    row = row_from_sample(sample, base_dir=conf.dataset_dir)
    config = CodingEnvConfig(
        backend=conf.sandbox,
        tool_parser=getattr(args, "sglang_tool_call_parser", None) or conf.tool_parser,
        reasoning_parser=getattr(args, "sglang_reasoning_parser", None),
        eval_timeout_s=conf.eval_timeout_s,
        grade_ahead=BACKENDS.load(conf.sandbox).idle_is_free,
    )
    return CodingEnv(
        row,
        config,
        prompt=render_prompt(row.problem_statement, row.workdir, conf.prompt_template),
        files={f"{row.workdir}/{PROBLEM_FILE}": row.problem_statement},
    )
