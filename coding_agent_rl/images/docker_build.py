"""``docker build`` through the engine's API (the docker SDK's classic builder) with nothing left
behind: intermediate containers are removed even when a step fails (``forcerm``); the images a
failed or cancelled build committed are removed; Ctrl-C (any exception) or :func:`cancel_all`
from another thread closes the build's connection, which makes the engine stop the build, and
removes its running container. Every line of output goes to ``log``; a failure raises
:class:`BuildFailed` with the root cause (failure.py)."""

from __future__ import annotations

import logging
import pathlib
import re
import socket
import threading
import time
from typing import Any, TextIO

from coding_agent_rl.images.common import ImageBuildError
from coding_agent_rl.images.failure import failing_command, root_cause

log = logging.getLogger(__name__)
_STEP = re.compile(r"^Step \d+/\d+ : ")
_RUNNING = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})$")
_COMMITTED = re.compile(r"^ ---> ([0-9a-f]{12,64})$")
_ACTIVE: set[_Build] = set()
_GUARD = threading.Lock()
_STOPPED = threading.Event()  # set by cancel_all: no build starts until reset()


class BuildFailed(ImageBuildError):
    """A step failed: ``cause`` is its telling line, ``command`` the failing shell command."""

    def __init__(self, message: str, cause: str, command: str):
        super().__init__(message)
        self.cause, self.command = cause, command


class BuildCancelled(ImageBuildError):
    """The build was interrupted; what it had made is removed."""


class _Build:
    """One build in flight: what it created, and the response to close to stop it."""

    def __init__(self, client: Any, sink: TextIO):
        self.client, self.sink = client, sink
        self.containers: list[str] = []
        self.images: list[str] = []
        self.steps = 0
        self.cached = False
        self.step_lines: list[str] = []
        self.cancelled = threading.Event()
        self.response: Any = None
        self.buffer = ""

    def line(self, text: str) -> None:
        self.sink.write(text + "\n")
        plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
        if _STEP.match(plain):
            self.steps += 1
            self.step_lines = []
        elif m := _RUNNING.match(plain):
            self.containers.append(m.group(1))
        elif plain == " ---> Using cache":
            self.cached = True
        elif m := _COMMITTED.match(plain):
            if self.steps > 1 and not self.cached:  # step 1's is the FROM image
                self.images.append(m.group(1))
            self.cached = False
        elif not plain.startswith("Removing intermediate container"):
            self.step_lines.append(text)

    def feed(self, chunk: str) -> None:
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split("\n")
        for ln in lines:
            self.line(ln)

    def stop(self) -> None:
        """Remove its container (the step fails) and shut its connection down (the engine
        stops the build; a thread blocked reading it wakes up)."""
        self.cancelled.set()
        self.remove_containers()
        sock = _socket(self.response)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError as e:  # already closed
            log.debug("shutting the build's connection down: %s", e)

    def remove_containers(self) -> None:
        for c in self.containers:
            try:
                self.client.api.remove_container(c, force=True)
            except Exception as e:  # already removed by the engine (forcerm)
                log.debug("container %s: %s", c, e)

    def remove_images(self, wait_s: float = 15.0) -> None:
        """Newest first, never forced; retried while the engine is still removing the build's
        containers (an image another build now uses stays, after ``wait_s``)."""
        import docker

        pending = list(reversed(self.images))
        deadline = time.monotonic() + wait_s
        while pending:
            for i in list(pending):
                try:
                    self.client.api.remove_image(i)
                    pending.remove(i)
                except docker.errors.NotFound:
                    pending.remove(i)
                except Exception as e:
                    log.debug("image %s: %s", i, e)
            if pending and time.monotonic() > deadline:
                log.warning("build images left in the engine (in use): %s", ", ".join(pending))
                return
            if pending:
                time.sleep(0.3)


def _socket(response: Any) -> socket.socket | None:
    """The socket under a streamed ``requests`` response (urllib3 2, or http.client's file)."""
    raw = getattr(response, "raw", None)
    sock = getattr(getattr(raw, "_connection", None), "sock", None)
    if sock is None:
        fp = getattr(getattr(raw, "_fp", None), "fp", None)
        sock = getattr(getattr(fp, "raw", None), "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def reset() -> None:
    """Let builds start again after :func:`cancel_all`."""
    _STOPPED.clear()


def raise_if_cancelled(what: str) -> None:
    if _STOPPED.is_set():
        raise BuildCancelled(f"{what}: cancelled")


def cancel_all() -> None:
    """Stop every build in flight in this process (their threads raise BuildCancelled); none
    starts until :func:`reset`."""
    _STOPPED.set()
    with _GUARD:
        active = list(_ACTIVE)
    for b in active:
        b.stop()


def _image_id(client: Any, tag: str) -> str:
    try:
        return str(client.api.inspect_image(tag)["Id"])
    except Exception:
        return ""


def _drop_if_dangling(client: Any, image_id: str) -> None:
    """The image ``tag`` named before a rebuild, when nothing names it now."""
    try:
        if not client.api.inspect_image(image_id).get("RepoTags"):
            client.api.remove_image(image_id)
    except Exception as e:  # in use by a container, or gone
        log.debug("previous image %s: %s", image_id, e)


def docker_build(
    tag: str,
    context: pathlib.Path,
    dockerfile: pathlib.Path,
    *,
    labels: dict[str, str],
    sink: TextIO,
    nocache: bool = False,
) -> str:
    """Build ``tag``; returns the image id. Raises BuildFailed / BuildCancelled /
    ImageBuildError; nothing it created is left when it raises. ``nocache``: no step is
    taken from the engine's build cache."""
    import docker

    raise_if_cancelled(f"build of {tag}")
    client = docker.from_env()
    b = _Build(client, sink)

    def keep_response(response: Any, *args: Any, **kwargs: Any) -> Any:
        if response.request.path_url.split("?")[0].endswith("/build"):
            b.response = response
        return response

    client.api.hooks["response"].append(keep_response)
    previous = _image_id(client, tag)
    with _GUARD:
        _ACTIVE.add(b)
    error = ""
    try:
        try:
            stream = client.api.build(
                path=str(context),
                dockerfile=str(dockerfile.absolute()),  # may lie outside the context
                tag=tag,
                labels=labels,
                rm=True,
                forcerm=True,
                nocache=nocache,
                pull=False,
                decode=True,
            )
            for chunk in stream:
                if b.cancelled.is_set():
                    raise BuildCancelled(f"build of {tag} cancelled")
                if "stream" in chunk:
                    b.feed(chunk["stream"])
                    sink.flush()  # a log one can follow while the build runs
                if "error" in chunk:
                    error = str(chunk["error"]).strip()
                    b.feed(f"\n{error}\n")
            b.feed("\n")
            sink.write(f"# docker build ended at {time.strftime('%H:%M:%S')}\n")
        except docker.errors.APIError as e:
            error = (e.explanation or str(e)).strip()
            b.feed(f"\n{error}\n")
        except Exception as e:
            if b.cancelled.is_set():
                raise BuildCancelled(f"build of {tag} cancelled") from None
            raise ImageBuildError(f"docker build of {tag}: {e}") from e
        if b.cancelled.is_set():
            raise BuildCancelled(f"build of {tag} cancelled")
        if error:
            cause = root_cause(b.step_lines) or error
            command = failing_command(b.step_lines, cause)
            raise BuildFailed(f"docker build of {tag} failed: {cause}", cause, command)
        built = _image_id(client, tag)
        if previous and previous != built:
            _drop_if_dangling(client, previous)
        return built
    except BaseException:
        b.stop()
        b.remove_images()
        raise
    finally:
        with _GUARD:
            _ACTIVE.discard(b)
        client.close()
