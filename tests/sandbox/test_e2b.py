"""E2B backend logic against a stand-in at the SDK boundary (E2B's cloud is unreachable here).

The stand-in binds every call to the installed SDK's signatures and raises the SDK's (and its
transport libraries') own exception classes; see ``tests/support/e2b_stand_in.py``.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
from typing import Any

import e2b
import httpx
import pyqwest
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.sandbox_async.commands.command import Commands
from e2b.sandbox_async.filesystem.filesystem import Filesystem
from support import BASE_IMAGE
from support.e2b_stand_in import CALLS

from coding_agent_rl import settings
from coding_agent_rl.errors import UserError
from coding_agent_rl.sandbox import SandboxCreateError, SandboxError, SandboxGone, create_sandbox
from coding_agent_rl.sandbox import e2b as backend

IMAGE = BASE_IMAGE
REAL = {  # the SDK classes our backend's objects are instances of
    "AsyncSandbox": e2b.AsyncSandbox,
    "Commands": Commands,
    "Filesystem": Filesystem,
    "AsyncCommandHandle": e2b.AsyncCommandHandle,
}


def _sdk_uses() -> set[str]:
    """``Class.method`` for every SDK method the backend's source names: ``AsyncSandbox.X``,
    ``self._sbx.X`` / ``.commands.X`` / ``.files.X`` and ``handle.X`` (a command handle)."""
    tree = ast.parse(pathlib.Path(backend.__file__).read_text())
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, base = [node.attr], node.value
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        root = base.id if isinstance(base, ast.Name) else None
        if root == "AsyncSandbox" and len(chain) == 1:
            found.add(f"AsyncSandbox.{chain[0]}")
        elif root == "handle" and len(chain) == 1:
            found.add(f"AsyncCommandHandle.{chain[0]}")
        elif root == "self" and chain[0] == "_sbx" and len(chain) >= 2:
            owner = {"commands": "Commands", "files": "Filesystem"}.get(chain[1])
            if owner and len(chain) == 3:
                found.add(f"{owner}.{chain[2]}")
            elif not owner and chain[1] != "sandbox_id":
                found.add(f"AsyncSandbox.{chain[1]}")
    return found


async def test_every_sdk_call_binds_to_the_installed_sdk_against_sdk_stand_in(
    use_e2b_stand_in: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each SDK method the backend names exists in the installed SDK, and a run through every
    path (create with every option, exec, a timed-out exec, write with a mode, read, kill) makes
    each of those calls with arguments the real signature accepts (the stand-in binds them)."""
    uses = _sdk_uses()
    assert {"AsyncSandbox.create", "Commands.run", "Filesystem.write", "Filesystem.read"} <= uses
    for name in uses:
        cls, method = name.split(".")
        assert hasattr(REAL[cls], method), f"{name} is not in the installed e2b SDK"
    async with create_sandbox(
        "e2b",
        IMAGE,
        api_key="e2b_" + "0" * 40,
        env={"A": "1"},
        network="adapter-only",
        allow_out=["203.0.113.5"],
    ) as sb:
        await sb.exec("true", user="nobody", cwd="/tmp")
        assert (await sb.exec("sleep 5", timeout=0.3)).timed_out
        await sb.write_file("/tmp/e2b-bind-probe", "x", mode=0o600)
        assert await sb.read_file("/tmp/e2b-bind-probe") == "x"
    called = {name for name, _ in CALLS}  # each bound to the real signature on the way in
    assert uses <= called, f"never exercised here: {uses - called}"
    (create,) = [args for name, args in CALLS if name == "AsyncSandbox.create"]
    assert create["opts"] == {"api_key": "e2b_" + "0" * 40} and create["idempotency_key"]


async def test_the_stand_in_refuses_what_the_sdk_refuses(use_e2b_stand_in: Any) -> None:
    """A keyword the installed SDK does not take fails in the stand-in as it would in the SDK."""
    stand_in = use_e2b_stand_in
    with pytest.raises(TypeError):  # not a create parameter (it lives in network=...)
        await stand_in.create(template="base", dns_servers=[])
    with pytest.raises(TypeError, match="unexpected keyword"):  # not an ApiParams key
        await stand_in.create(template="base", request_timeout_s=5)
    with pytest.raises(TypeError, match="network"):  # not a SandboxNetworkOpts key
        await stand_in.create(template="base", network={"allow_out": [], "dns": []})
    with pytest.raises(e2b.InvalidArgumentException):  # the SDK's own key check
        await stand_in.create(template="base", idempotency_key="Not_Valid")
    box = await stand_in.create(template="base")
    try:
        with pytest.raises(TypeError):
            await box.commands.run("true", env={"A": "1"})  # the SDK says envs
        with pytest.raises(TypeError):
            await box.files.write("/tmp/x", b"", mode=0o644)  # the files API has no mode
        # What the backend's feature checks see is the real signature too.
        assert "use_octet_stream" in inspect.signature(box.files.write).parameters
        assert "idempotency_key" in inspect.signature(stand_in.create).parameters
    finally:
        await box.kill()


async def test_e2b_image_is_the_template_by_default_against_sdk_stand_in(
    use_e2b_stand_in: Any,
) -> None:
    async with create_sandbox(
        "e2b",
        IMAGE,
        lifetime_s=600,
        api_key="e2b_" + "0" * 40,
        metadata={"team": "rl"},
        env={"FROM_OPTION": "1"},
    ) as sb:
        assert (await sb.exec("echo $FROM_OPTION")).stdout == "1\n"
    (call,) = use_e2b_stand_in.created
    assert call["template"] == IMAGE and call["timeout"] == 600
    assert call["metadata"] == {"team": "rl"} and call["api_key"] == "e2b_" + "0" * 40


async def test_e2b_metadata_routing_puts_the_image_in_metadata_against_sdk_stand_in(
    use_e2b_stand_in: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLIME_AGENT_SANDBOX_IMAGE_METADATA_KEY", "image")
    async with create_sandbox("e2b", "registry.example/task:abc"):
        pass
    monkeypatch.setenv("SLIME_AGENT_E2B_TEMPLATE", "base")
    async with create_sandbox("e2b", "registry.example/task:def"):
        pass
    first, second = use_e2b_stand_in.created
    assert first["template"] is None and first["metadata"] == {"image": "registry.example/task:abc"}
    assert second["template"] == "base" and second["metadata"] == {
        "image": "registry.example/task:def"
    }


async def test_e2b_create_retries_refusals_not_auth_errors_against_sdk_stand_in(
    use_e2b_stand_in: Any,
) -> None:
    use_e2b_stand_in.create_errors[:] = [e2b.ServiceBusyException("503: busy")]
    async with create_sandbox("e2b", IMAGE) as sb:
        assert (await sb.exec("echo ok")).stdout == "ok\n"
    use_e2b_stand_in.create_errors[:] = [e2b.AuthenticationException("401: Unauthorized")]
    with pytest.raises(SandboxCreateError, match="Unauthorized"):
        async with create_sandbox("e2b", IMAGE):
            pass


async def test_a_lost_create_answer_leaves_one_billed_sandbox_against_sdk_stand_in(
    use_e2b_stand_in: Any,
) -> None:
    """E2B made the sandbox but its answer was lost (httpx's RemoteProtocolError, as the SDK
    raises it). Without an idempotency key the retry makes a second, billed sandbox; with the
    key every attempt carries, E2B answers the retry with the first one."""
    stand_in = use_e2b_stand_in
    stand_in.faults["create_lost"] = 1
    sb = create_sandbox("e2b", IMAGE)
    sb.idempotency_key = None  # the defence off: what the backend did before
    async with sb:
        assert len(stand_in.live) == 2  # the harm: one sandbox nobody will kill, billed
    assert len(stand_in.live) == 1
    stand_in.reset()
    stand_in.faults["create_lost"] = 1
    async with create_sandbox("e2b", IMAGE) as sb:
        assert len(stand_in.live) == 1 and (await sb.exec("echo ok")).stdout == "ok\n"
        first, retry = stand_in.created
        assert first["idempotency_key"] == retry["idempotency_key"] == sb.idempotency_key
    assert stand_in.live == []


async def test_an_sdk_without_idempotency_keys_never_resends_a_lost_create_against_sdk_stand_in(
    use_e2b_stand_in: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = use_e2b_stand_in

    class OldSDK(stand_in):  # type: ignore[misc,valid-type]
        @classmethod
        async def create(cls, template=None, timeout=None, metadata=None, envs=None, **opts):  # type: ignore[no-untyped-def,override]
            return await stand_in.create(
                template=template, timeout=timeout, metadata=metadata, envs=envs, **opts
            )

    monkeypatch.setattr(backend, "AsyncSandbox", OldSDK)
    stand_in.faults["create_lost"] = 1
    with pytest.raises(SandboxCreateError, match="disconnected"):
        async with create_sandbox("e2b", IMAGE):
            pass
    assert len(stand_in.created) == 1  # not sent again: it may have been made
    stand_in.create_errors[:] = [e2b.RateLimitException("429: slow down")]
    async with create_sandbox("e2b", IMAGE):  # a refusal made nothing: sent again
        pass
    assert len(stand_in.created) == 3


@pytest.mark.parametrize("defence", ["off", "on"])
async def test_a_dropped_command_stream_is_retried_only_when_idempotent_against_sdk_stand_in(
    use_e2b_stand_in: Any, monkeypatch: pytest.MonkeyPatch, defence: str
) -> None:
    """The envd stream breaks after the command started: the SDK raises connectrpc's
    ConnectError (UNAVAILABLE over a pyqwest ReadError) while the sandbox is up. An idempotent
    exec is sent again; a non-idempotent one is not (it ran once, and may have done its work)."""
    if defence == "off":  # the backend's classification before: ConnectError was not transient
        monkeypatch.setattr(backend, "_CONNECT_TRANSIENT", frozenset())
    async with create_sandbox("e2b", IMAGE, retries=2) as sb:
        d = (await sb.exec("mktemp -d", check=True)).stdout.strip()
        cmd = f"echo ran >> {d}/count; echo out"
        use_e2b_stand_in.faults["stream_drop"] = 1
        if defence == "off":
            with pytest.raises(SandboxError) as lost:
                await sb.exec(cmd)
            assert isinstance(lost.value.__cause__, ConnectError)
            return
        assert (await sb.exec(cmd)).stdout == "out\n"
        assert (await sb.exec(f"cat {d}/count")).stdout == "ran\nran\n"
        use_e2b_stand_in.faults["stream_drop"] = 1
        with pytest.raises(SandboxError, match="connection reset") as once:
            await sb.exec(cmd, idempotent=False)
        assert isinstance(once.value.__cause__, ConnectError)
        assert (await sb.exec(f"cat {d}/count")).stdout == "ran\nran\nran\n"


async def test_a_dropped_upload_is_sent_again_against_sdk_stand_in(use_e2b_stand_in: Any) -> None:
    async with create_sandbox("e2b", IMAGE) as sb:
        use_e2b_stand_in.faults["upload_drop"] = 1
        await sb.write_file("/tmp/e2b-upload-drop", b"payload")
        assert await sb.read_file("/tmp/e2b-upload-drop") == "payload"
        assert use_e2b_stand_in.faults["upload_drop"] == 0  # the drop happened


def test_transient_errors_are_the_sdks_and_its_transports() -> None:
    def chained(code: Code) -> ConnectError:
        try:
            raise ConnectError(code, "stream broke") from pyqwest.ReadError("reset")
        except ConnectError as e:
            return e

    for error in (
        chained(Code.UNAVAILABLE),
        ConnectError(Code.UNKNOWN, "?"),
        httpx.ReadError("reset"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        pyqwest.StreamError("stream reset", pyqwest.StreamErrorCode.CANCEL),
        e2b.SandboxUnreachableException("unreachable"),
        e2b.ServiceBusyException("503"),
        e2b.RateLimitException("429"),
    ):
        assert backend.transient(error), error
    for error in (
        ConnectError(Code.INVALID_ARGUMENT, "bad"),
        ConnectError(Code.PERMISSION_DENIED, "no"),
        e2b.SandboxNotRunningException("gone"),
        e2b.SandboxNotFoundException("gone"),
        e2b.AuthenticationException("401"),
        e2b.InvalidArgumentException("400"),
    ):
        assert not backend.transient(error), error


async def test_e2b_killed_sandbox_is_reported_gone_against_sdk_stand_in(
    use_e2b_stand_in: Any,
) -> None:
    async with create_sandbox("e2b", IMAGE, retries=1) as sb:
        await sb._sbx.kill()  # E2B ended it (lifetime reached)
        with pytest.raises(SandboxGone):
            await sb.exec("true")
        with pytest.raises(SandboxGone):
            await sb.read_file("/etc/hostname")


async def test_lifetime_defaults_to_an_hour_and_ends_the_sandbox_against_sdk_stand_in(
    use_e2b_stand_in: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that dies without closing its sandboxes leaves nothing for long: E2B removes each
    sandbox when its time-to-live (the SDK's ``timeout`` at create) runs out."""
    monkeypatch.delenv("CODING_AGENT_RL_E2B_LIFETIME_S", raising=False)
    async with create_sandbox("e2b", IMAGE):
        pass
    monkeypatch.setenv("CODING_AGENT_RL_E2B_LIFETIME_S", "1800")
    async with create_sandbox("e2b", IMAGE):
        pass
    default, configured = use_e2b_stand_in.created
    assert default["timeout"] == 3600  # E2B's Hobby/Base plan maximum
    assert configured["timeout"] == 1800
    async with create_sandbox("e2b", IMAGE, lifetime_s=1) as sb:
        running = sb.exec("sleep 30", timeout=60)
        with pytest.raises(SandboxGone):  # the stream broke when the VM ended
            await running
        assert use_e2b_stand_in.live == []


async def test_lifetime_above_the_plan_maximum_is_refused_up_front_against_sdk_stand_in(
    use_e2b_stand_in: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unchecked, E2B refuses it at every create (the API's 400, as the SDK raises it).
    with pytest.raises(SandboxCreateError, match="Timeout cannot be greater than 1 hours"):
        async with create_sandbox("e2b", IMAGE, lifetime_s=3900, max_lifetime_s=86400):
            pass
    with pytest.raises(ValueError, match=r"lifetime 3900 s exceeds the plan's maximum 3600 s"):
        create_sandbox("e2b", IMAGE, lifetime_s=3900)
    monkeypatch.setenv("CODING_AGENT_RL_E2B_LIFETIME_S", "3900")
    assert settings.load(sandbox="docker").e2b_lifetime_s == 3900  # not E2B: nothing to refuse
    with pytest.raises(UserError) as refused:
        settings.load(sandbox="e2b")
    assert "\n" not in str(refused.value)
    assert "CODING_AGENT_RL_E2B_LIFETIME_S=3900" in str(refused.value)
    assert "CODING_AGENT_RL_E2B_MAX_LIFETIME_S=3600" in str(refused.value)
    monkeypatch.setenv("CODING_AGENT_RL_E2B_MAX_LIFETIME_S", "86400")  # a Pro plan
    use_e2b_stand_in.max_lifetime_s = 86400
    async with create_sandbox("e2b", IMAGE):
        pass
    assert use_e2b_stand_in.created[-1]["timeout"] == 3900


async def test_uploads_are_octet_stream_with_a_size_scaled_timeout_against_sdk_stand_in(
    use_e2b_stand_in: Any,
) -> None:
    """With the SDK's default request timeout (60 s) an upload over a slow link fails; ours
    asks for max(600 s, size at 1 MiB/s) and goes through."""
    stand_in = use_e2b_stand_in
    stand_in.link_bytes_per_s = 1000.0  # 100 kB need 100 s
    data = b"\0" * 100_000
    box = await stand_in.create(template="base")
    try:
        with pytest.raises(httpx.WriteTimeout):  # the harm: what the backend did before
            await box.files.write("/tmp/e2b-slow-upload", data, user="root")
    finally:
        await box.kill()
    async with create_sandbox("e2b", IMAGE) as sb:
        await sb.write_file("/tmp/e2b-slow-upload", data)
        assert len(await sb.read_file("/tmp/e2b-slow-upload", binary=True)) == 100_000
    writes = [args for name, args in CALLS if name == "Filesystem.write"]
    assert writes[-1]["use_octet_stream"] is True and writes[-1]["request_timeout"] == 600.0
    assert backend.upload_timeout(3 << 30, 600.0) == 3072.0  # 3 GiB: 1 MiB/s for the lot
