"""Process-wide plumbing for the Docker backend: client, thread pool, labels, gc, gateway.

The docker SDK is blocking; every call runs on a dedicated thread pool (not asyncio's default
executor, which has only ``cpu + 4`` threads and would serialise 16+ concurrent execs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import functools
import ipaddress
import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import docker
import docker.errors

from coding_agent_rl import settings
from coding_agent_rl.sandbox import owner

T = TypeVar("T")

LABEL_RUN = "coding-agent-rl.run"
LABEL_SANDBOX = "coding-agent-rl.sandbox"

_lock = threading.Lock()
_client: docker.DockerClient | None = None
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_run_id: str | None = None


def client() -> docker.DockerClient:
    """The process-wide client (``DOCKER_HOST`` etc. honoured), created on first use."""
    global _client
    with _lock:
        if _client is None:
            # One pooled connection per concurrent call; exec streams hold theirs for their
            # whole duration, so the SDK's default of 10 would churn connections.
            _client = docker.DockerClient.from_env(max_pool_size=256, timeout=120)
        return _client


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(512, thread_name_prefix="car-docker")
        return _pool


def _observe(fut: asyncio.Future[Any]) -> None:
    # A call whose awaiting task was cancelled still finishes; mark its error as seen.
    if not fut.cancelled():
        fut.exception()


def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """Run a blocking SDK call on the Docker thread pool."""
    loop = asyncio.get_running_loop()
    fut = loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))
    fut.add_done_callback(_observe)
    return fut


def submit(fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """Run ``fn`` on the pool without an event loop (cleanup that must outlive a cancelled task)."""
    return _executor().submit(fn, *args)


def is_local() -> bool:
    """Whether the engine runs on this machine (a unix socket), so that bind-mounted host paths
    name this machine's files. ``DOCKER_HOST=tcp://...`` or ``ssh://...`` is another machine."""
    host = settings.current().docker_host or ""
    return not host or host.startswith("unix://")


def default_run_id() -> str:
    """This process's run id (labels every container it creates unless ``run_id`` is given)."""
    global _run_id
    with _lock:
        if _run_id is None:
            _run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        return _run_id


def owner_labels() -> dict[str, str]:
    """This process as the owner of what it creates (:mod:`coding_agent_rl.sandbox.owner`)."""
    return owner.current().labels()


def _label_filter(run_id: str | None) -> dict[str, Any]:
    labels = [f"{LABEL_SANDBOX}=1"]
    if run_id is not None:
        labels.append(f"{LABEL_RUN}={run_id}")
    return {"label": labels}


def list_containers(run_id: str | None = None) -> list[dict[str, Any]]:
    """Our containers (all runs unless ``run_id``), as the engine's list summaries."""
    return client().api.containers(all=True, filters=_label_filter(run_id))


def remove_container(cid: str) -> bool:
    """Force-remove a container and its anonymous volumes; False when it was already gone."""
    try:
        client().api.remove_container(cid, force=True, v=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as e:
        if e.status_code == 409:  # removal already in progress
            return False
        raise


def remove_volumes_named(names: list[str]) -> int:
    """Remove these volumes where they still exist (a container removal usually took them);
    returns how many this call removed."""
    removed = 0
    for name in names:
        try:
            client().api.remove_volume(name)
            removed += 1
        except docker.errors.APIError:  # gone already, or (briefly) still in use
            pass
    return removed


def remove_volumes(run_id: str | None = None) -> int:
    """Remove our labelled volumes that no container uses any more; returns how many."""
    removed = 0
    for v in client().api.volumes(filters=_label_filter(run_id)).get("Volumes") or []:
        try:
            client().api.remove_volume(v["Name"])
            removed += 1
        except docker.errors.APIError:  # in use (a live sandbox) or already gone
            pass
    return removed


def list_images(run_id: str | None = None) -> list[dict[str, Any]]:
    """Our snapshot images (prepared sandboxes committed: :mod:`docker_snapshot`)."""
    return client().api.images(filters=_label_filter(run_id))


def remove_image(image_id: str) -> bool:
    """Remove a snapshot image; False when it was already gone (or a container still uses it:
    the reaper takes it on a later pass, once that container went)."""
    try:
        client().api.remove_image(image_id, force=True, noprune=False)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as e:
        if e.status_code == 409:
            return False
        raise


def _remove_images(images: list[dict[str, Any]]) -> int:
    return sum(remove_image(i["Id"]) for i in images)


async def gc_report(run_id: str | None = None) -> dict[str, int]:
    """Remove our containers (of ``run_id``, or of every run), then their leftovers: labelled
    volumes and capped disks (:mod:`coding_agent_rl.sandbox.disk`); how many of each went."""
    from coding_agent_rl.sandbox import disk

    summaries = await in_thread(list_containers, run_id)
    removed = await asyncio.gather(*(in_thread(remove_container, s["Id"]) for s in summaries))
    volumes = await in_thread(remove_volumes, run_id)
    disks = await in_thread(disk.gc, run_id) if is_local() else 0
    images = await in_thread(_remove_images, await in_thread(list_images, run_id))
    return {"containers": sum(removed), "volumes": volumes, "disks": disks, "snapshots": images}


def _orphan_volumes() -> list[str]:
    volumes = client().api.volumes(filters=_label_filter(None)).get("Volumes") or []
    return [v["Name"] for v in volumes if owner.is_orphan(v.get("Labels"))]


async def reap_report() -> dict[str, int]:
    """Remove the sandboxes whose owner process is gone (:func:`owner.is_orphan`: on this host,
    and dead or its pid recycled), then the volumes, capped disks and snapshot images such
    owners left; how many
    of each went. Sandboxes of live owners, of owners on other hosts and without owner labels
    stay (``sandboxes gc`` removes those)."""
    from coding_agent_rl.sandbox import disk

    summaries = await in_thread(list_containers, None)
    orphans = [s["Id"] for s in summaries if owner.is_orphan(s.get("Labels"))]
    removed = await asyncio.gather(*(in_thread(remove_container, cid) for cid in orphans))
    # A container's removal (-v) usually took its volumes; what is left (e.g. a container
    # removed without -v, or one that died before its volumes were attached) goes now.
    volumes = await in_thread(remove_volumes_named, await in_thread(_orphan_volumes))
    disks = await in_thread(disk.reap_orphans) if is_local() else 0
    images = [i for i in await in_thread(list_images) if owner.is_orphan(i.get("Labels"))]
    snapshots = await in_thread(_remove_images, images)
    return {"containers": sum(removed), "volumes": volumes, "disks": disks, "snapshots": snapshots}


async def gc(run_id: str | None = None) -> int:
    """:func:`gc_report`; returns how many containers were removed."""
    return (await gc_report(run_id))["containers"]


def _interface_ipv4(name: str) -> str | None:
    """IPv4 address of a local network interface (SIOCGIFADDR), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def gateway_ip(network: str = "bridge") -> str:
    """The address containers on ``network`` use to reach the host.

    The IPAM gateway when the engine reports one; Debian's engine 20.10 lists only the subnet
    for the default bridge, so then the bridge interface's address, else the subnet's first host.
    """
    info = client().api.inspect_network(network)
    configs = (info.get("IPAM") or {}).get("Config") or []
    for cfg in configs:
        if cfg.get("Gateway"):
            return cfg["Gateway"].split("/")[0]
    bridge = (info.get("Options") or {}).get("com.docker.network.bridge.name")
    if bridge:
        with contextlib.suppress(OSError):
            address = _interface_ipv4(bridge)
            if address:
                return address
    for cfg in configs:
        if not cfg.get("Subnet"):
            continue
        subnet = ipaddress.ip_network(cfg["Subnet"], strict=False)
        if subnet.version == 4:
            return str(next(subnet.hosts()))
    raise RuntimeError(f"cannot determine the gateway of docker network {network!r}")
