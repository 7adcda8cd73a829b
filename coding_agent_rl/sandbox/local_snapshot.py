"""Local snapshots: the prepared sandbox's private copies, copied (reflinks where the file
system has them) into a folder of their own; each copy seeds its private copies from there.
The folder is recorded like a sandbox's (:mod:`local_orphans`): a dead owner's is reaped."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

from coding_agent_rl.sandbox import admission, local_orphans
from coding_agent_rl.sandbox.base import Sandbox, SandboxError
from coding_agent_rl.sandbox.snapshot import Snapshot


class LocalSnapshot(Snapshot):
    backend = "local"

    def __init__(
        self,
        image: str,
        store: pathlib.Path,
        seeds: dict[str, str],
        options: Any,
        make: Callable[..., Sandbox],
    ):
        self.image = image
        self.make = make  # the backend's sandbox class
        self.store = store
        self.seeds = seeds
        self.options = dict(options)
        self.snapshot_id = self.name = store.name

    @classmethod
    def freeze(
        cls,
        image: str,
        copies: dict[str, pathlib.Path],
        options: dict[str, Any],
        make: Callable[..., Sandbox],
    ) -> LocalSnapshot:
        """Blocking: copy ``copies`` (sandbox path -> host folder) into a new snapshot."""
        store = pathlib.Path(tempfile.mkdtemp(prefix=f"car-snap-{uuid.uuid4().hex[:6]}-"))
        local_orphans.record(store.name, store, [])
        seeds = {}
        try:
            for i, (path, host) in enumerate(sorted(copies.items())):
                target = store / f"{i}{path.replace('/', '_')}"
                subprocess.run(
                    ["cp", "-a", "--reflink=auto", str(host), str(target)],
                    check=True,
                    capture_output=True,
                )
                seeds[path] = str(target)
        except (OSError, subprocess.CalledProcessError) as e:
            shutil.rmtree(store, ignore_errors=True)
            local_orphans.forget(store.name)
            raise SandboxError(f"local sandbox: cannot snapshot: {e}") from e
        return cls(image, store, seeds, options, make)

    async def _copy(self) -> Sandbox:
        opts = {**self.options, "seeds": self.seeds}
        return await admission.start(lambda: self.make(self.image, **opts))

    async def _remove(self) -> None:
        shutil.rmtree(self.store, ignore_errors=True)
        local_orphans.forget(self.snapshot_id)
