"""Bounded reads of files programs in a sandbox could have written: a
1 GiB sparse file costs the host at most the cap, and whatever sits at the path — a directory,
a FIFO nobody writes to, a symbolic link — is reported, never opened."""

from __future__ import annotations

import time

import pytest

from coding_agent_rl.harness.base import agent_log
from coding_agent_rl.images.common import BASE_IMAGE
from coding_agent_rl.sandbox import create_sandbox
from coding_agent_rl.sandbox.capped_read import read_capped

pytestmark = pytest.mark.docker


async def test_reads_are_capped_and_never_block():
    async with create_sandbox("docker", BASE_IMAGE) as sb:
        await sb.exec(
            "truncate -s 1G /tmp/big && printf 'the end\\n' >> /tmp/big && mkdir /tmp/dir"
            " && mkfifo /tmp/fifo && ln -s /tmp/big /tmp/link"
            " && head -c 2M /dev/urandom > /tmp/2m",
            check=True,
        )
        # Baseline: 2 MiB read whole; reading all of /tmp/big would take 512 times that.
        t0 = time.monotonic()
        assert (await read_capped(sb, "/tmp/2m", 4 * 2**20)).size == 2 * 2**20
        whole_s = 512 * (time.monotonic() - t0)
        t0 = time.monotonic()
        big = await read_capped(sb, "/tmp/big", 64 * 1024)
        capped_s = time.monotonic() - t0
        assert capped_s < whole_s / 4, (capped_s, whole_s)
        assert big.size == 2**30 + 8 and big.truncated
        assert big.data.endswith(b"the end\n") and b"bytes dropped" in big.data
        assert len(big.data) < 64 * 1024 + 200
        # A cap past what one exec's output carries is lowered to it, not cut mid-encoding.
        await sb.exec("head -c 8M /dev/urandom > /tmp/8m", check=True)
        wide = await read_capped(sb, "/tmp/8m", 16 * 2**20)
        assert wide.size == 8 * 2**20 and wide.truncated and wide.cap < 8 * 2**20
        assert b"bytes dropped" in wide.data and len(wide.data) < wide.cap + 200
        head = await read_capped(sb, "/tmp/big", 16, keep="head")
        assert head.data == bytes(16)
        assert (await read_capped(sb, "/tmp/dir", 10)).size == -2
        assert (await read_capped(sb, "/tmp/fifo", 10, timeout=20)).size == -2
        assert (await read_capped(sb, "/tmp/link", 10)).size == -2
        assert (await read_capped(sb, "/tmp/none", 10)).size == -1
        # The agent's log, read best-effort: whatever is there, a copy comes back.
        assert (
            await agent_log(sb, "/tmp/dir")
            == b"[coding-agent-rl: the agent log is not a regular file]\n"
        )
        assert len(await agent_log(sb, "/tmp/big", cap=1024)) < 1200
