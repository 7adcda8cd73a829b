"""A listening socket inside another network namespace: how an isolated sandbox reaches the adapter.

A sandbox with no network (Docker ``network=none``, bubblewrap ``--unshare-net``) has only its
own loopback interface. We enter its namespace on a short-lived thread (``setns`` affects only
the calling thread), create a TCP socket bound to ``127.0.0.1:PORT`` there, and hand it to the
adapter, which serves it from its own event loop: a program in the sandbox dials
``http://127.0.0.1:PORT`` and reaches the adapter, and nothing else. No relay process, no
packet-filter rule, nothing to clean up after a crash (the socket dies with our process).

Needs root (``CAP_SYS_ADMIN`` over the namespace) and the sandbox's processes on this host.
:func:`netns_cookie` identifies the namespace a connection came from (Linux >= 5.14), so the
adapter can tie a listener to one session.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
SO_NETNS_COOKIE = 71  # <asm-generic/socket.h>, Linux >= 5.14


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into the sandbox's network namespace: {os.strerror(err)}")


def listen_in_netns(ns_path: str, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on ``host:port`` inside the namespace at ``ns_path`` (e.g.
    ``/proc/PID/ns/net``). Blocking; raises ``OSError`` when it cannot."""
    result: dict[str, object] = {}

    def inside() -> None:
        try:
            fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(128)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            result["sock"] = sock
        except BaseException as e:  # handed to the caller's thread
            result["error"] = e

    # A fresh thread: its namespace changes with it and ends with it.
    t = threading.Thread(target=inside, name="car-netns", daemon=True)
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["sock"]  # type: ignore[return-value]


def netns_cookie(sock: socket.socket | None) -> int | None:
    """The network namespace cookie of ``sock`` (None where the kernel has none)."""
    if sock is None:
        return None
    try:
        return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")
    except OSError:
        return None


def host_ipv4_addresses() -> list[str]:
    """Every IPv4 address of this host's interfaces (loopback, uplinks, bridges), sorted."""
    from coding_agent_rl.sandbox.docker_engine import _interface_ipv4

    found = {_interface_ipv4(name) for _, name in socket.if_nameindex()}
    return sorted(a for a in found if a)
