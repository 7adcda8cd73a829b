"""Files in a Docker container through the archive API: tars built in memory, binary-safe.

No shell is involved, so content and paths need no quoting. Extracting at ``/`` creates missing
parent directories (root-owned, 0755); callers that need other owners create them first.
"""

from __future__ import annotations

import base64
import io
import json
import posixpath
import tarfile
import time
from typing import Any

import docker.errors

from coding_agent_rl.sandbox import docker_engine as engine
from coding_agent_rl.sandbox.base import SandboxError, SandboxFileNotFound, SandboxGone

_GO_MODE_DIR = 1 << 31  # Go's os.FileMode bits, as the engine reports them
_GO_MODE_SYMLINK = 1 << 27


def stat(cid: str, path: str) -> dict[str, Any] | None:
    """The engine's stat of ``path`` (HEAD on the archive endpoint), None when missing."""
    api = engine.client().api
    # The SDK has no call for this endpoint; its session and URL builder do the transport.
    url = api._url("/containers/{0}/archive", cid)  # type: ignore[attr-defined]  # SDK internal
    res = api.head(url, params={"path": path})
    if res.status_code == 404:  # no such path, or no such container (put_archive tells)
        return None
    if not res.ok:
        raise SandboxError(f"cannot stat {path}: engine answered HTTP {res.status_code}")
    return json.loads(base64.b64decode(res.headers["X-Docker-Container-Path-Stat"]))


def put_file(cid: str, path: str, data: bytes, uid: int, gid: int, mode: int | None) -> None:
    """Write ``data`` to absolute ``path`` (owner ``uid:gid``, ``mode`` default 0644)."""
    found = stat(cid, path)
    if found is not None and found["mode"] & _GO_MODE_DIR:
        # The engine would replace the whole directory with the file.
        raise SandboxError(f"cannot write {path}: it is a directory")
    info = tarfile.TarInfo(path.lstrip("/"))
    info.size, info.uid, info.gid = len(data), uid, gid
    info.mode = 0o644 if mode is None else mode
    info.mtime = int(time.time())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    try:
        engine.client().api.put_archive(cid, "/", buf.getvalue())
    except docker.errors.NotFound as e:
        raise SandboxGone(f"docker sandbox {cid[:12]} is gone: {e}") from e
    except docker.errors.APIError as e:
        raise SandboxError(f"cannot write {path}: {e.explanation or e}") from e


def get_file(cid: str, path: str) -> bytes:
    """The content of ``path``, following symbolic links like ``open()`` would."""
    api = engine.client().api
    for _ in range(16):
        try:
            chunks, found = api.get_archive(cid, path)
        except docker.errors.NotFound as e:
            if "No such container" in str(e):
                raise SandboxGone(f"docker sandbox {cid[:12]} is gone") from e
            raise SandboxFileNotFound(f"{path}: no such file in the sandbox") from e
        if found["mode"] & _GO_MODE_DIR:
            raise SandboxError(f"cannot read {path}: it is a directory")
        if found["mode"] & _GO_MODE_SYMLINK:
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), found["linkTarget"]))
            continue
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member else None
            if handle is None:
                raise SandboxError(f"cannot read {path}: not a regular file")
            return handle.read()
    raise SandboxError(f"cannot read {path}: too many levels of symbolic links")
