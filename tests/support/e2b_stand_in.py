"""A faithful stand-in for ``e2b.AsyncSandbox`` at the SDK boundary (E2B's cloud is unreachable).

Same method names, signatures, return types (``CommandResult``, ``WriteInfo``) and the SDK's own
exception classes; commands run on this host as ``/bin/bash -l -c CMD`` (what envd runs), in a
per-sandbox temp dir. Only what our backend uses is modelled.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import pwd
import shutil
import signal
import tempfile
import uuid
from typing import Any

from e2b import (
    CommandExitException,
    CommandResult,
    FileNotFoundException,
    FileType,
    SandboxException,
    SandboxNotRunningException,
    TimeoutException,
    WriteInfo,
)

KNOWN_TEMPLATES = {"base", "coding-agent-rl/base:latest"}
_TAG = "E2B_STAND_IN_SANDBOX"  # marks every process of a stand-in sandbox (its "VM")


def _kill_tagged(sandbox_id: str) -> None:
    """What the VM's end does: every process of the sandbox dies."""
    needle = f"{_TAG}={sandbox_id}".encode()
    for _ in range(5):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                os.kill(int(name), signal.SIGKILL)
                found = True
            except OSError:
                continue
        if not found:
            return


class StandInCommandHandle:
    """Mirrors ``AsyncCommandHandle``: ``pid``, ``wait()``, ``kill()``, ``disconnect()``."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        on_stdout: Any,
        on_stderr: Any,
        timeout: float | None,
        retain_output: bool,
    ):
        self._proc = proc
        self._stdout: list[str] | None = [] if retain_output else None
        self._stderr: list[str] | None = [] if retain_output else None
        self._task = asyncio.ensure_future(self._run(on_stdout, on_stderr, timeout))

    @property
    def pid(self) -> int:
        return self._proc.pid

    async def _pump(self, stream: asyncio.StreamReader, sink: list[str] | None, cb: Any) -> None:
        while chunk := await stream.read(65536):
            text = chunk.decode("utf-8", "replace")
            if sink is not None:
                sink.append(text)
            if cb is not None:
                res = cb(text)
                if asyncio.iscoroutine(res):
                    await res

    async def _run(self, on_stdout: Any, on_stderr: Any, timeout: float | None) -> int:
        work = asyncio.gather(
            self._pump(self._proc.stdout, self._stdout, on_stdout),
            self._pump(self._proc.stderr, self._stderr, on_stderr),
            self._proc.wait(),
        )
        try:
            await asyncio.wait_for(work, timeout or None)
        except asyncio.TimeoutError:
            # envd's stream deadline: the SDK reports it, the process is not killed.
            raise TimeoutException("context deadline exceeded: the command timed out") from None
        return self._proc.returncode

    async def wait(self) -> CommandResult:
        code = await self._task
        out = None if self._stdout is None else "".join(self._stdout)
        err = None if self._stderr is None else "".join(self._stderr)
        if code != 0:
            raise CommandExitException(stdout=out, stderr=err, exit_code=code, error=None)
        return CommandResult(stdout=out, stderr=err, exit_code=code, error=None)

    async def kill(self) -> bool:
        try:
            self._proc.send_signal(signal.SIGKILL)
            return True
        except ProcessLookupError:
            return False

    async def disconnect(self) -> None:
        self._task.cancel()
        await asyncio.wait([self._task])


class StandInCommands:
    def __init__(self, box: StandInAsyncSandbox):
        self._box = box

    async def run(
        self,
        cmd: str,
        background: bool | None = None,
        envs: dict[str, str] | None = None,
        user: str | None = None,
        cwd: str | None = None,
        on_stdout: Any = None,
        on_stderr: Any = None,
        stdin: bool | None = None,
        timeout: float | None = 60,
        request_timeout: float | None = None,
        *,
        retain_output: bool = True,
    ) -> Any:
        self._box._check()
        argv = ["/bin/bash", "-l", "-c", cmd]
        if user not in (None, "root"):
            try:
                entry = pwd.getpwnam(user)
            except KeyError:
                raise SandboxException(f"user {user!r} does not exist") from None
            argv = [
                "setpriv",
                f"--reuid={entry.pw_uid}",
                f"--regid={entry.pw_gid}",
                "--clear-groups",
                *argv,
            ]
        env = {**os.environ, **self._box.envs, **(envs or {}), _TAG: self._box.sandbox_id}
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd or str(self._box.root),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        handle = StandInCommandHandle(proc, on_stdout, on_stderr, timeout, retain_output)
        return handle if background else await handle.wait()

    async def kill(self, pid: int, request_timeout: float | None = None) -> bool:
        try:
            os.kill(pid, signal.SIGKILL)
            return True
        except ProcessLookupError:
            return False


class StandInFilesystem:
    def __init__(self, box: StandInAsyncSandbox):
        self._box = box

    async def write(
        self,
        path: str,
        data: Any,
        user: str | None = None,
        request_timeout: float | None = None,
        **_: Any,
    ) -> WriteInfo:
        self._box._check()
        target = pathlib.Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else bytes(data))
        if user not in (None, "root"):
            entry = pwd.getpwnam(user)
            os.chown(target, entry.pw_uid, entry.pw_gid)
        return WriteInfo(name=target.name, type=FileType.FILE, path=str(target))

    async def read(
        self,
        path: str,
        format: str = "text",
        user: str | None = None,
        request_timeout: float | None = None,
        **_: Any,
    ) -> Any:
        self._box._check()
        target = pathlib.Path(path)
        if not target.is_file():
            raise FileNotFoundException(f"path '{path}' does not exist")
        data = target.read_bytes()
        return bytearray(data) if format == "bytes" else data.decode("utf-8", "replace")


class StandInAsyncSandbox:
    """``AsyncSandbox.create(...)`` -> an object with ``commands``, ``files``, ``kill()``."""

    created: list[dict[str, Any]] = []  # create() kwargs, for tests of template routing

    def __init__(self, template: str, envs: dict[str, str] | None):
        self.sandbox_id = f"standin-{uuid.uuid4().hex[:10]}"
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="e2b-stand-in-"))
        self.root.chmod(0o777)
        self.envs = dict(envs or {})
        self.alive = True
        self.commands = StandInCommands(self)
        self.files = StandInFilesystem(self)

    def _check(self) -> None:
        if not self.alive:
            raise SandboxNotRunningException("sandbox was not found: killed or timed out")

    @classmethod
    async def create(
        cls,
        template: str | None = None,
        timeout: int | None = None,
        metadata: dict[str, str] | None = None,
        envs: dict[str, str] | None = None,
        secure: bool | None = None,
        allow_internet_access: bool | None = None,
        network: dict[str, Any] | None = None,
        **opts: Any,
    ) -> StandInAsyncSandbox:
        # The SDK's network switches are recorded, not enforced (a local process sandbox).
        net = {"allow_internet_access": allow_internet_access, "network": network}
        cls.created.append(
            {
                "template": template,
                "timeout": timeout,
                "metadata": metadata,
                "envs": envs,
                **{k: v for k, v in net.items() if v is not None},
                **opts,
            }
        )
        template = template or "base"
        if template not in KNOWN_TEMPLATES:
            raise SandboxException(f"404: template '{template}' not found", status_code=404)
        return cls(template, envs)

    async def kill(self, **opts: Any) -> bool:
        was_alive, self.alive = self.alive, False
        await asyncio.to_thread(_kill_tagged, self.sandbox_id)
        shutil.rmtree(self.root, ignore_errors=True)
        return was_alive
