"""The agent-side behaviour before the tamper defences, to switch a defence off in a test (monkeypatch):
the run directory owned by the agent user, the launcher running as the agent (so the agent
could rewrite its own pid / exit markers and log), the whole log read into memory, every adapter
error >= 500 counted as an infrastructure failure, request fields passed through unchecked.
Reproduced from this repository's history (harness/launch.py, harness/base.py, adapter/)."""

from __future__ import annotations

import shlex
from typing import Any

from coding_agent_rl.adapter import fields, handler, wire
from coding_agent_rl.harness import base as harness_base
from coding_agent_rl.harness import launch


def launcher_script(spec: launch.LaunchSpec) -> str:
    q = shlex.quote
    run = q(spec.run_dir)
    exports = f'export PATH={q(spec.path_prefix)}:"$PATH"\n' if spec.path_prefix else ""
    exports += "".join(f"export {k}={q(v)}\n" for k, v in spec.env.items())
    return (
        "#!/bin/bash\n"
        f"echo $$ > {run}/pid\n"
        f"cd {q(spec.cwd)} || exit 126\n"
        f"{exports}"
        f"{' '.join(q(a) for a in spec.argv)} > {run}/agent.log 2>&1 < /dev/null\n"
        f"echo $? > {run}/exit.tmp && mv {run}/exit.tmp {run}/exit\n"
    )


async def prepare(sb: Any, spec: launch.LaunchSpec) -> None:
    run = shlex.quote(spec.run_dir)
    stop_old = f'if read -r p < {run}/pid 2>/dev/null; then kill -KILL -- -"$p" 2>/dev/null; fi'
    await sb.exec(f"{stop_old}; rm -rf {run} && mkdir -p {run} && chown {spec.user}: {run}")
    await sb.write_file(f"{spec.run_dir}/launch.sh", launcher_script(spec).encode(), mode=0o755)


async def launch_as_agent(sb: Any, spec: launch.LaunchSpec) -> bool:
    res = await sb.exec(launch.launch_command(spec), user=spec.user, timeout=60, check=True)
    return "launched" in res.stdout.split()


async def read_whole_log(sb: Any, path: str, cap: int = 0) -> bytes:
    return await sb.read_file(path, binary=True)  # raises for a directory; no size limit


def agent_evidence_off(monkeypatch: Any) -> None:
    """The agent owns its run directory and markers; the host reads the whole log, strictly."""
    monkeypatch.setattr(launch, "prepare", prepare)
    monkeypatch.setattr(launch, "launch", launch_as_agent)
    monkeypatch.setattr(harness_base, "agent_log", read_whole_log)


def adapter_attribution_off(monkeypatch: Any) -> None:
    """Fields pass through unchecked; every adapter error >= 500 counts as infrastructure."""

    def passthrough(body, *, max_tokens, stop, stop_single_ok=False, top_k=True):
        out = {"max_new_tokens": body.get(max_tokens[0]), "temperature": body.get("temperature")}
        return {k: v for k, v in out.items() if v is not None}

    monkeypatch.setattr(fields, "sampling", passthrough)
    monkeypatch.setattr(fields, "common", lambda body: None)
    monkeypatch.setattr(handler, "parse_request", lambda w, body: w.parse(body))
    monkeypatch.setattr(handler, "error_note", lambda err: f"infra: {err.message}")
    assert wire.parse_request is not None
