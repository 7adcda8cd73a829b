"""E2B backend logic against a stand-in at the SDK boundary (E2B's cloud is unreachable here)."""

from __future__ import annotations

from typing import Any

import e2b
import pytest
from support import BASE_IMAGE

from coding_agent_rl.sandbox import SandboxCreateError, SandboxError, SandboxGone, create_sandbox

IMAGE = BASE_IMAGE


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


class FlakyCreate:
    """Wraps the stand-in: the first ``create`` fails with the SDK's ServiceBusyException."""

    failures: list[Exception] = []

    @classmethod
    async def create(cls, **kwargs: Any) -> Any:
        from support.e2b_stand_in import StandInAsyncSandbox

        if cls.failures:
            raise cls.failures.pop()
        return await StandInAsyncSandbox.create(**kwargs)


async def test_e2b_create_retries_transient_errors_only_against_sdk_stand_in(
    use_e2b_stand_in: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coding_agent_rl.sandbox import e2b as backend

    monkeypatch.setattr(backend, "AsyncSandbox", FlakyCreate)
    FlakyCreate.failures = [e2b.ServiceBusyException("503: busy")]
    async with create_sandbox("e2b", IMAGE) as sb:
        assert (await sb.exec("echo ok")).stdout == "ok\n"
    FlakyCreate.failures = [e2b.AuthenticationException("401: Unauthorized")]
    with pytest.raises(SandboxCreateError, match="Unauthorized"):
        async with create_sandbox("e2b", IMAGE):
            pass


async def test_e2b_exec_retries_transport_failures_only_when_idempotent_against_sdk_stand_in(
    use_e2b_stand_in: Any,
) -> None:
    async with create_sandbox("e2b", IMAGE, retries=2) as sb:
        commands = sb._sbx.commands
        real_run = commands.run
        drops: list[Exception] = []

        async def flaky_run(cmd: str, **kwargs: Any) -> Any:
            if drops:
                raise drops.pop()
            return await real_run(cmd, **kwargs)

        commands.run = flaky_run
        drops.append(e2b.SandboxUnreachableException("connection lost"))
        assert (await sb.exec("echo again")).stdout == "again\n"
        drops.append(e2b.SandboxUnreachableException("connection lost"))
        with pytest.raises(SandboxError, match="connection lost"):
            await sb.exec("echo once", idempotent=False)


async def test_e2b_killed_sandbox_is_reported_gone_against_sdk_stand_in(
    use_e2b_stand_in: Any,
) -> None:
    async with create_sandbox("e2b", IMAGE, retries=1) as sb:
        await sb._sbx.kill()  # E2B ended it (lifetime reached)
        with pytest.raises(SandboxGone):
            await sb.exec("true")
        with pytest.raises(SandboxGone):
            await sb.read_file("/etc/hostname")


async def test_e2b_sandboxes_get_a_time_to_live_from_the_settings_against_sdk_stand_in(
    use_e2b_stand_in: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that dies without closing its sandboxes leaves nothing for long: E2B removes each
    sandbox when its time-to-live (the SDK's ``timeout`` at create) runs out."""
    monkeypatch.delenv("CODING_AGENT_RL_E2B_LIFETIME_S", raising=False)
    async with create_sandbox("e2b", IMAGE):
        pass
    monkeypatch.setenv("CODING_AGENT_RL_E2B_LIFETIME_S", "4321")
    async with create_sandbox("e2b", IMAGE):
        pass
    default, configured = use_e2b_stand_in.created
    assert default["timeout"] == 3900  # settings.e2b_lifetime_s's default
    assert default["timeout"] > 3600  # above the default rollout deadline
    assert configured["timeout"] == 4321
