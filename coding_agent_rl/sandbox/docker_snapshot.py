"""Docker snapshots: the prepared container committed to an image (``docker commit``),
labelled like its container (run, owner: the reaper removes a dead run's), copies are new
containers of that image.

The container to commit is made without the capped disk (its writes must land in its own
layer, which a commit keeps; volumes are not committed); each copy gets its capped disk, onto
which the engine copies the image's content at those paths, as for any image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coding_agent_rl.sandbox import admission
from coding_agent_rl.sandbox import docker_engine as engine
from coding_agent_rl.sandbox.base import Sandbox
from coding_agent_rl.sandbox.snapshot import Snapshot


class DockerSnapshot(Snapshot):
    backend = "docker"

    def __init__(self, image_id: str, options: dict[str, Any], make: Callable[..., Sandbox]):
        self.image_id = image_id
        self.make = make  # the backend's sandbox class
        self.options = options
        self.name = image_id[:19]

    async def _copy(self) -> Sandbox:
        return await admission.start(lambda: self.make(self.image_id, **self.options))

    async def _remove(self) -> None:
        await engine.in_thread(engine.remove_image, self.image_id)


def commit(cid: str, labels: dict[str, str]) -> str:
    """Blocking: commit container ``cid`` (paused meanwhile) as an untagged image; its id."""
    return engine.client().api.commit(cid, conf={"Labels": labels}, pause=True)["Id"]
