"""A real multi-node Ray cluster on this machine, each node with its own Docker engine (for
``bench rollout --executor ray`` and the cluster tests).

:class:`SecondEngine` starts another ``dockerd`` (its own socket, data root, exec root, pidfile
and a bridge of its own on a free ``172.31.X.0/24``, ``--iptables=false``) and loads images into
it from the main engine. :class:`LocalCluster` starts a Ray head and further nodes with ``ray
start`` (each its own temp dir, ports, ``coding_agent_rl_slots``, and its engine's
``DOCKER_HOST`` in its environment, which its workers inherit), and can kill one node's
processes as a lost machine would be. ``close()`` removes everything they made, also after a
failure: Ray nodes and the engine are stopped by their own pids (never ``ray stop``, which stops
every cluster on the machine), the bridge deleted, the folders removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

SLOTS = "coding_agent_rl_slots"
# The head's node health checks (Ray's system config, read from RAY_<name>): a killed node is
# declared dead after ~3 s instead of Ray's default ~15-30 s, so a node-loss test waits less.
HEALTH_CHECKS = {
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pids_matching(needle: str) -> list[int]:
    """Processes whose command line contains ``needle``."""
    out = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and int(entry.name) != os.getpid():
            out.append(int(entry.name))
    return out


def kill_pids(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pathlib.Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)


class SecondEngine:
    """Another Docker engine on this machine; ``host`` is its ``DOCKER_HOST``."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix=f"car-d{tag}-", dir="/tmp"))
        self.bridge = f"carbr{tag}"
        self.socket = self.dir / "d.sock"
        self.host = f"unix://{self.socket}"
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.subnet_prefix: str | None = None
        self._log = self.dir / "dockerd.log"

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run with this engine as its ``DOCKER_HOST``."""
        return ["env", f"DOCKER_HOST={self.host}", *argv]

    def docker(self, *args: str) -> list[str]:
        return ["docker", "-H", self.host, *args]

    def start(self, timeout: float = 60.0) -> SecondEngine:
        self.subnet_prefix = _free_subnet()
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.subnet_prefix}.1/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        with self._log.open("w") as log:
            proc = subprocess.Popen(
                [
                    "dockerd",
                    "--host",
                    self.host,
                    "--data-root",
                    str(self.dir / "data"),
                    "--exec-root",
                    str(self.dir / "exec"),
                    "--pidfile",
                    str(self.dir / "d.pid"),
                    "--bridge",
                    self.bridge,
                    "--iptables=false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid, self._proc = proc.pid, proc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"second dockerd exited: {self._log.read_text()[-2000:]}")
            ok = subprocess.run(self.docker("info"), capture_output=True)
            if ok.returncode == 0:
                return self
            time.sleep(0.5)
        raise RuntimeError(f"second dockerd not ready in {timeout:g}s")

    def load(self, images: list[str]) -> None:
        """``docker save IMAGES | DOCKER_HOST=<this> docker load``."""
        save = subprocess.Popen(
            ["env", "-u", "DOCKER_HOST", "docker", "save", *images], stdout=subprocess.PIPE
        )
        load = subprocess.run(self.docker("load", "-q"), stdin=save.stdout, capture_output=True)
        assert save.stdout is not None
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise RuntimeError(f"loading {images} into {self.host}: {load.stderr.decode()[-500:]}")

    def containers(self, label: str) -> list[str]:
        out = subprocess.run(
            self.docker("ps", "-aq", "--filter", f"label={label}"),
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.split()

    def close(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(subprocess.CalledProcessError, OSError):
                ids = subprocess.run(
                    self.docker("ps", "-aq"), capture_output=True, text=True
                ).stdout.split()
                if ids:  # every container of this engine is ours: it is our engine
                    subprocess.run(self.docker("rm", "-f", *ids), capture_output=True)
            kill_pids([self.pid], signal.SIGTERM)
            _wait_gone([self.pid], 10)
            kill_pids([self.pid])
            if self._proc is not None:
                self._proc.wait()  # reaped
                self._proc = None
            # its containerd and shims run under its exec root
            kill_pids(pids_matching(str(self.dir / "exec")))
            self.pid = None
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
        for mount in _mounts_under(self.dir):
            subprocess.run(["umount", "-l", mount], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclasses.dataclass
class NodeSpec:
    slots: int
    docker_host: str | None = None  # None: the main engine
    num_cpus: int = 2


class LocalCluster:
    """Ray nodes on this machine; ``address`` is the head's ``127.0.0.1:PORT``."""

    def __init__(self, nodes: list[NodeSpec]):
        self.specs = nodes
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.tag = uuid.uuid4().hex[:6]
        self.temp_dirs: list[pathlib.Path] = []
        self._ray = str(pathlib.Path(sys.executable).parent / "ray")

    def start(self, timeout: float = 120.0) -> LocalCluster:
        for i, spec in enumerate(self.specs):
            tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"car-r{i}{self.tag}-", dir="/tmp"))
            self.temp_dirs.append(tmp)
            args = [
                self._ray,
                "start",
                "--temp-dir",
                str(tmp),
                "--resources",
                json.dumps({SLOTS: spec.slots}),
                "--num-cpus",
                str(spec.num_cpus),
                "--object-store-memory",
                str(100 * 1024 * 1024),
                "--node-manager-port",
                str(free_port()),
                "--object-manager-port",
                str(free_port()),
                "--dashboard-agent-listen-port",
                str(free_port()),
                "--dashboard-agent-grpc-port",
                str(free_port()),
                "--runtime-env-agent-port",
                str(free_port()),
                "--metrics-export-port",
                str(free_port()),
                "--disable-usage-stats",
            ]
            if i == 0:
                args += [
                    "--head",
                    "--port",
                    str(self.port),
                    "--include-dashboard=false",
                    "--dashboard-port",
                    str(free_port()),
                    "--node-ip-address",
                    "127.0.0.1",
                ]
            else:
                args += ["--address", self.address, "--node-ip-address", "127.0.0.1"]
            # the node's engine: its workers inherit this environment
            engine = [f"DOCKER_HOST={spec.docker_host}"] if spec.docker_host else []
            checks = [f"RAY_{k}={v}" for k, v in HEALTH_CHECKS.items()] if i == 0 else []
            args = ["env", "-u", "DOCKER_HOST", "-u", "RAY_ADDRESS", *engine, *checks, *args]
            r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
            if r.returncode != 0:
                raise RuntimeError(f"ray start (node {i}) failed: {r.stderr[-2000:]}")
        self.wait_nodes(len(self.specs), timeout)
        return self

    def alive_slot_nodes(self) -> int:
        code = (
            f"import ray; ray.init(address={self.address!r}, logging_level='ERROR'); "
            "print(sum(1 for n in ray.nodes() if n['Alive'] and "
            f"n['Resources'].get({SLOTS!r})))"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        return int(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else -1

    def wait_nodes(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_slot_nodes() == n:
                return
            time.sleep(1)
        raise RuntimeError(f"the Ray cluster at {self.address} has not {n} slot nodes")

    def node_pids(self, i: int) -> list[int]:
        return pids_matching(str(self.temp_dirs[i]))

    def kill_node(self, i: int) -> list[int]:
        """SIGKILL node ``i``'s processes (raylet, agents, workers): a lost machine."""
        pids = self.node_pids(i)
        kill_pids(pids)
        return pids

    def close(self) -> None:
        # workers and agents first, the head's GCS last; nothing of a node outlives its folder
        for i in reversed(range(len(self.temp_dirs))):
            pids = self.node_pids(i)
            kill_pids(pids)
            _wait_gone(pids, 5)
        for tmp in self.temp_dirs:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


def _free_subnet() -> str:
    """``172.31.X`` with X not routed on this machine yet."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    addrs = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    taken = routes + addrs
    start = int(uuid.uuid4().hex[:2], 16) % 250 + 2
    for k in range(250):
        x = (start + k) % 250 + 2
        if f"172.31.{x}." not in taken:
            return f"172.31.{x}"
    raise RuntimeError("no free 172.31.X.0/24 subnet")


def _mounts_under(root: pathlib.Path) -> list[str]:
    with contextlib.suppress(OSError):
        lines = pathlib.Path("/proc/mounts").read_text().splitlines()
        found = [line.split()[1] for line in lines if len(line.split()) > 1]
        return sorted((m for m in found if m.startswith(str(root))), reverse=True)
    return []


def describe(cluster: LocalCluster | None, engine: SecondEngine | None) -> dict[str, Any]:
    return {
        "ray_address": cluster.address if cluster else None,
        "second_engine": engine.host if engine else None,
    }
