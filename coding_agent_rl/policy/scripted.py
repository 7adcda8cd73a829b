"""``scripted:FILE``: a policy that plays a fixed script, per session.

Steps are consumed in order per session; rules (matched on the last message or the whole
prompt) answer first and consume no step; after the last step every request gets ``final``. The
file format: docs/modules/policy.md.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any

from coding_agent_rl.policy.base import GenerateRequest, PolicyEnv, Prompt, TextPolicy
from coding_agent_rl.policy.shell import shell_text

ACTIONS = ("shell", "say", "tool")
DEFAULT_FINAL = "Done."


def _check_action(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict) or sum(k in entry for k in ACTIONS) != 1:
        raise ValueError(f"{where}: needs exactly one of {', '.join(ACTIONS)}: {entry!r}")
    tool = entry.get("tool")
    if tool is not None and not (isinstance(tool, dict) and isinstance(tool.get("name"), str)):
        raise ValueError(f"{where}: 'tool' needs a name and arguments: {tool!r}")
    return entry


class ScriptedPolicy(TextPolicy):
    name = "scripted"

    def __init__(self, script: dict[str, Any]):
        if not isinstance(script, dict):
            raise ValueError("a script is a JSON object with 'steps' and/or 'rules'")
        self.steps = [
            _check_action(s, f"steps[{i}]") for i, s in enumerate(script.get("steps", []))
        ]
        self.rules = [
            self._check_rule(r, f"rules[{i}]") for i, r in enumerate(script.get("rules", []))
        ]
        self.final = str(script.get("final", DEFAULT_FINAL))
        self._uses: dict[tuple[str, int], int] = collections.defaultdict(int)  # (session, rule)
        self._position: dict[str, int] = collections.defaultdict(int)

    @staticmethod
    def _check_rule(rule: Any, where: str) -> dict[str, Any]:
        if not isinstance(rule, dict) or not ({"match", "match_prompt"} & set(rule)):
            raise ValueError(f"{where}: a rule needs 'match' and/or 'match_prompt': {rule!r}")
        checked = dict(rule)
        for key in ("match", "match_prompt"):
            if key in rule:
                checked[key] = re.compile(rule[key], re.S)
        if "steps" in rule:
            checked["steps"] = [
                _check_action(s, f"{where}.steps[{i}]") for i, s in enumerate(rule["steps"])
            ]
        else:
            _check_action(rule, where)
        return checked

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedPolicy:
        return cls(json.loads(Path(path).read_text()))

    def reply_text(self, request: GenerateRequest, prompt: Prompt, env: PolicyEnv) -> str:
        action = self._next_action(request.session, prompt)
        think = action.get("think") if action else None
        body = self._render(action, prompt, env) if action else self.final
        return f"<think>\n{think}\n</think>\n\n{body}" if think else body

    def _next_action(self, session: str, prompt: Prompt) -> dict[str, Any] | None:
        for i, rule in enumerate(self.rules):
            uses = self._uses[session, i]
            steps = rule.get("steps")
            limit = len(steps) if steps is not None else rule.get("times")
            if limit is not None and uses >= limit:
                continue
            if "match" in rule and not rule["match"].search(prompt.last_message):
                continue
            if "match_prompt" in rule and not rule["match_prompt"].search(prompt.text):
                continue
            self._uses[session, i] = uses + 1
            return steps[uses] if steps is not None else rule
        position = self._position[session]
        if position >= len(self.steps):
            return None
        self._position[session] = position + 1
        return self.steps[position]

    @staticmethod
    def _render(action: dict[str, Any], prompt: Prompt, env: PolicyEnv) -> str:
        if "shell" in action:
            return shell_text(prompt, str(action["shell"]), env)
        if "tool" in action:
            tool = action["tool"]
            return env.format_call(tool["name"], dict(tool.get("arguments") or {}))
        return str(action["say"])
