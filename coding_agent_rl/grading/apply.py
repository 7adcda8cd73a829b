"""Apply a patch with a fallback ladder: ``git apply``, ``git apply --3way``, ``patch --fuzz``.

Each rung starts from the base: a failed rung's partial result (``--3way`` conflict markers,
files ``patch`` half wrote) is undone in the same exec before the next rung. The first rung that
succeeds names the method; when none does, the caller scores a model failure. A rung's own
output goes to a log file, never to stdout, so file names inside the patch cannot forge what the
caller reads back (``then`` runs after a successful rung and owns stdout). Nothing sized by the
patch rides on the command line beyond fixed bounds: the paths to undo and a long ``then`` script
travel as files (400 new files make a list past the kernel's 128 KiB argument limit).
"""

from __future__ import annotations

import base64
import dataclasses
import posixpath

from coding_agent_rl.grading.workspace import (
    GIT,
    WorkspaceError,
    path_list,
    q,
    restore_list_script,
)
from coding_agent_rl.patches.files import patch_paths
from coding_agent_rl.sandbox.base import Sandbox

LADDER: tuple[tuple[str, str], ...] = (
    ("git apply", f"{GIT} apply --whitespace=nowarn {{patch}}"),
    ("git apply --3way", f"{GIT} apply --3way --whitespace=nowarn {{patch}}"),
    ("patch --fuzz", "patch --batch --fuzz=5 -p1 --forward --no-backup-if-mismatch -i {patch}"),
)


INLINE_PATCH_BYTES = 48 * 1024  # Linux caps one command-line argument at 128 KiB
INLINE_SCRIPT_BYTES = 24 * 1024  # a longer ``then`` script or path list goes through a file


class AfterApplyError(WorkspaceError):
    """``then`` failed after a rung applied the patch: the patch may be why (grade.py decides)."""


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
    names = path_list(patch_paths(patch.decode("utf-8", "surrogateescape")))
    list_path, then_path = patch_path + ".paths", patch_path + ".then"
    inline = {}
    if not written and len(patch) <= INLINE_PATCH_BYTES:
        inline[patch_path] = patch
    elif not written:
        await sb.write_file(patch_path, patch, mode=0o644)
    if len(names) <= INLINE_SCRIPT_BYTES // 3:
        inline[list_path] = names
    else:
        await sb.write_file(list_path, names, mode=0o600)
    if len(then) > INLINE_SCRIPT_BYTES:
        await sb.write_file(then_path, then, mode=0o600)
        then = f". {q(then_path)}\n"
    write = "".join(
        f"mkdir -p {q(posixpath.dirname(path))} && printf %s {q(base64.b64encode(data).decode())}"
        f" | base64 -d > {q(path)} || exit 125\n"
        for path, data in inline.items()
    )
    undo = restore_list_script(base, list_path) if names else ""
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
                raise AfterApplyError(f"after applying the patch: {(r.stderr or r.stdout)[-500:]}")
            return ApplyOutcome(
                method=name, log="\n".join(logs), then_output=r.stdout[len("CAR-APPLIED\n") :]
            )
        logs.append(f"$ {name}: exit {r.exit_code}\n{(r.stdout + r.stderr).strip()[-1500:]}")
    return ApplyOutcome(method=None, log="\n".join(logs))
