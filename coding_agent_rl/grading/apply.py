"""Apply a patch with a fallback ladder: ``git apply``, ``git apply --3way``, ``patch --fuzz``.

Each rung starts from the base: a failed rung's partial result (``--3way`` conflict markers,
files ``patch`` half wrote) is undone in the same exec before the next rung. The first rung that
succeeds names the method; when none does, the caller scores a model failure. A rung's own
output goes to a log file, never to stdout, so file names inside the patch cannot forge what the
caller reads back (``then`` runs after a successful rung and owns stdout).
"""

from __future__ import annotations

import base64
import dataclasses
import posixpath

from coding_agent_rl.grading.workspace import GIT, WorkspaceError, q, restore_script
from coding_agent_rl.patches.files import patch_paths
from coding_agent_rl.sandbox.base import Sandbox

LADDER: tuple[tuple[str, str], ...] = (
    ("git apply", f"{GIT} apply --whitespace=nowarn {{patch}}"),
    ("git apply --3way", f"{GIT} apply --3way --whitespace=nowarn {{patch}}"),
    ("patch --fuzz", "patch --batch --fuzz=5 -p1 --forward --no-backup-if-mismatch -i {patch}"),
)


INLINE_PATCH_BYTES = 48 * 1024  # Linux caps one command-line argument at 128 KiB


@dataclasses.dataclass(frozen=True)
class ApplyOutcome:
    method: str | None
    log: str
    then_output: str = ""

    @property
    def ok(self) -> bool:
        return self.method is not None


async def apply_patch(
    sb: Sandbox,
    workdir: str,
    patch: bytes,
    *,
    base: str,
    patch_path: str,
    runner: str = "",
    ladder: tuple[tuple[str, str], ...] = LADDER,
    then: str = "",
    written: bool = False,
    timeout: float = 300,
) -> ApplyOutcome:
    """Try each rung of ``ladder`` in ``workdir``; ``runner`` prefixes the rung (e.g. setpriv).

    The patch is written to ``patch_path`` (readable by the runner's user) unless ``written``:
    inside the first rung's exec when it fits on a command line, else through the file API.
    ``then`` is a root script run in the workdir right after the first successful rung.
    """
    write = ""
    if not written and len(patch) <= INLINE_PATCH_BYTES:
        data = q(base64.b64encode(patch).decode())
        folder = q(posixpath.dirname(patch_path))
        write = f"mkdir -p {folder} && printf %s {data} | base64 -d > {q(patch_path)} || exit 125\n"
    elif not written:
        await sb.write_file(patch_path, patch, mode=0o644)
    undo = restore_script(base, patch_paths(patch.decode("utf-8", "surrogateescape")))
    log_path = q(patch_path + ".log")
    logs: list[str] = []
    for name, template in ladder:
        rung = template.format(patch=q(patch_path))
        script = (
            f"{write}cd {q(workdir)}\nif {runner}{rung} > {log_path} 2>&1; then\n"
            f"echo CAR-APPLIED\n{then or ':'}\nelse\nrc=$?\necho CAR-FAILED\ntail -c 1500 {log_path}\n{undo or ':'}\n"
            "exit $rc\nfi\n"
        )
        r = await sb.exec(f"set -uo pipefail\n{script}", timeout=timeout)
        if write and r.exit_code == 125 and not r.stdout:
            raise WorkspaceError(f"cannot write {patch_path}: {r.stderr.strip()[-300:]}")
        write = ""  # the later rungs find it in place
        if r.stdout.startswith("CAR-APPLIED\n"):
            if not r.ok:
                raise WorkspaceError(f"after applying the patch: {(r.stderr or r.stdout)[-500:]}")
            return ApplyOutcome(
                method=name, log="\n".join(logs), then_output=r.stdout[len("CAR-APPLIED\n") :]
            )
        logs.append(f"$ {name}: exit {r.exit_code}\n{(r.stdout + r.stderr).strip()[-1500:]}")
    return ApplyOutcome(method=None, log="\n".join(logs))
