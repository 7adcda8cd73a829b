"""One agent session (:class:`HarnessContext`) and how its CLI ended (:class:`AgentRun`)."""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Mapping, Sequence

from coding_agent_rl.errors import HarnessError
from coding_agent_rl.harness import launch
from coding_agent_rl.harness.agent_user import default_home


class HarnessConfigError(HarnessError, ValueError):
    """A harness option or one of its environment variables is malformed."""


@dataclasses.dataclass(frozen=True)
class HarnessContext:
    """One agent session in one sandbox."""

    adapter_url: str  # as the sandbox sees it, without /v1 (e.g. http://172.17.0.1:18001)
    session_id: str  # the adapter session; the CLI sends it as its API key
    model: str  # the policy's model name, passed to the CLI verbatim
    workdir: str  # the repository the agent works in (owned by ``user``)
    log_dir: pathlib.Path | None = None  # host folder the agent's log is copied to
    user: str = "agent"
    home: str | None = None  # default /home/<user> (/root for root)
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # merged last
    args: Sequence[str] = ()  # appended to the command line
    tag: str = "agent"  # names the run directory; one tag = one run at a time

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.tag):
            raise HarnessConfigError(f"tag {self.tag!r}: use letters, digits, '_', '.', '-'")

    @property
    def agent_home(self) -> str:
        return self.home or default_home(self.user)

    @property
    def run_dir(self) -> str:
        return f"{launch.RUN_ROOT}/{self.tag}"


@dataclasses.dataclass(frozen=True)
class AgentRun:
    """How the agent CLI ended. A non-zero exit or a timeout is the model's outcome, not an error."""

    exit_code: int | None  # None when killed at the budget or vanished
    timed_out: bool
    duration_s: float
    log_path: str  # in the sandbox (outside the workdir, so never part of the diff)
    log_tail: str  # the last lines of the log, for error reports
    host_log_path: pathlib.Path | None = None  # the copy in ctx.log_dir

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
