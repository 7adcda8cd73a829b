"""A coding environment without an agent CLI: the policy's tool calls run in a task's sandbox.

The sandbox is handed in, its workspace prepared and the repository owned by the agent user (the
rollout pipeline does that: ``rollout/native.py``); this module never creates sandboxes or
grades. Tools (``tools.py``): ``bash``, ``file_editor``, ``submit``. An ill-formed or unknown
call is answered as an observation (the turn is used). ``submit`` -- or a reply without a tool
call (``on_no_tool_call="submit"``; ``"nudge"`` asks for one instead) -- ends the episode. A
row's ``metadata.problem_images`` are shown after the task text; ``file_editor view`` of an image
answers with the image.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
from typing import Any

from coding_agent_rl.env.base import BaseInteractionEnv, FatalEnvError
from coding_agent_rl.env.editor import run_editor
from coding_agent_rl.env.tools import (
    TOOLS,
    ToolLimits,
    ToolResult,
    Workspace,
    error,
    run_bash,
)
from coding_agent_rl.model.parsers import parse_assistant
from coding_agent_rl.model.parsers.xml_calls import convert
from coding_agent_rl.sandbox import Sandbox, SandboxError, SandboxGone
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
    tool_parser: str = default("tool_parser")
    reasoning_parser: str | None = default("reasoning_parser")
    user: str = "agent"
    limits: ToolLimits = dataclasses.field(default_factory=ToolLimits)
    on_no_tool_call: str = "submit"
    system_prompt: str = SYSTEM_PROMPT
    max_calls_per_turn: int = 16  # further calls in one reply are answered with an error

    def __post_init__(self) -> None:
        if self.on_no_tool_call not in NO_TOOL_CALL:
            raise ValueError(f"on_no_tool_call must be one of {NO_TOOL_CALL}")


class CodingEnv(BaseInteractionEnv):
    """One task (a :class:`~coding_agent_rl.datasets.schema.TaskRow`) in the prepared sandbox
    ``sandbox``; ``prompt``: the task text of the user message."""

    tools = TOOLS

    def __init__(
        self,
        row: Any,
        config: CodingEnvConfig | None = None,
        *,
        prompt: str,
        sandbox: Sandbox | None = None,
    ):
        self.row = row
        self.config = config or CodingEnvConfig()
        self.prompt = prompt
        self.sb = sandbox
        self.ws: Workspace | None = None
        self.transcript: list[tuple[str, str]] = []  # (action, observation), uncut

    # ---- reset -----------------------------------------------------------------------------------
    async def reset(self) -> tuple[dict[str, Any], dict[str, Any]]:
        cfg, row, sb = self.config, self.row, self.sb
        if sb is None:
            raise FatalEnvError("no sandbox: the coding env runs on a sandbox it is handed")
        home = "/root" if cfg.user == "root" else f"/home/{cfg.user}"  # agent_user.py's
        self.ws = Workspace(sb, cfg.user, home, row.workdir, cfg.limits)
        messages = [
            {"role": "system", "content": cfg.system_prompt},
            {"role": "user", "content": await self._task_content(sb)},
        ]
        return {"messages": messages, "tools": TOOLS}, {}

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

    async def close(self) -> None:
        self.ws = None  # the sandbox is its owner's


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


# Episodes of this environment run through the rollout pipeline (sandbox, workspace, grading):
# slime's native entry hands its samples to the shared runtime.
PIPELINE_AGENT = "native"
