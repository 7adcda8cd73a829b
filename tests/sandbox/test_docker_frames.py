"""The Docker exec stream reader: output that reached the client together with the response head
is kept, and a stream that is not framed is refused."""

from __future__ import annotations

import socket
import struct

import pytest
from docker.utils.socket import frames_iter

from coding_agent_rl.sandbox import SandboxError
from coding_agent_rl.sandbox.docker_exec import frames


def frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(data)) + data


def response_file(payload: bytes):
    """A connection whose head *and* first frames arrive in one piece, read the way
    http.client reads a response head (a buffered file, one line at a time)."""
    ours, theirs = socket.socketpair()
    theirs.sendall(b"HTTP/1.1 101 UPGRADED\r\n\r\n" + payload)
    theirs.shutdown(socket.SHUT_WR)
    fp = ours.makefile("rb")
    while fp.readline() not in (b"\r\n", b""):
        pass
    return fp, (ours, theirs)


BODY = frame(1, b"CAR-BASE abc\n") + frame(2, b"warn\n") + frame(1, b"A" * 70000)


def test_frames_already_buffered_with_the_head_are_read() -> None:
    fp, socks = response_file(BODY)
    got = list(frames(fp))
    assert b"".join(c for k, c in got if k == 1) == b"CAR-BASE abc\n" + b"A" * 70000
    assert b"".join(c for k, c in got if k == 2) == b"warn\n"
    for s in socks:
        s.close()


def test_the_sdks_reader_of_the_bare_socket_loses_them() -> None:
    """What the fix is for: reading the socket under the buffer (the SDK's way) starts after
    whatever the buffer took, here all of it."""
    fp, socks = response_file(BODY)
    assert b"CAR-BASE" not in b"".join(data for _, data in frames_iter(fp.raw, tty=False))
    for s in socks:
        s.close()


def test_an_unframed_stream_is_a_sandbox_error() -> None:
    fp, socks = response_file(b"AAAAAAAAAAAA")
    with pytest.raises(SandboxError, match="out of frame"):
        list(frames(fp))
    for s in socks:
        s.close()


def test_a_truncated_frame_ends_the_stream() -> None:
    fp, socks = response_file(frame(1, b"x" * 100)[:50])
    assert b"".join(c for _, c in frames(fp)) == b"x" * 42
    for s in socks:
        s.close()
