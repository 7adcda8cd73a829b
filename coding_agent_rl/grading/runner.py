"""Run a test command in the grading sandbox as an unprivileged user, with a hard time limit.

Tests run as uid 4999 in a root-owned, unlistable scratch directory; every process of that uid is
killed afterwards; the result channel's descriptors are opened before privileges drop; the log,
the JUnit report and the channel come back capped in one exec. Details:
docs/modules/grading.md.
"""

from __future__ import annotations

import dataclasses
import secrets
import time

from coding_agent_rl.grading.workspace import q, run_checked
from coding_agent_rl.sandbox.base import Sandbox
from coding_agent_rl.sandbox.capped_read import EMIT, Capped, emit_command, parse_emitted

TEST_UID = 4999
CHANNEL_FD, KEY_FD = 198, 199

_SETUP = r"""d={d}
mkdir -p "$d/out" "$d/home" "$d/plugin"
chmod 711 "$d"  # traversable, not listable: the test user reaches out/, home/, plugin/ only
chmod 755 "$d/plugin"
mode=root
if command -v setpriv >/dev/null 2>&1; then
  chown -R {uid}:{uid} {wd} "$d/out" "$d/home"
  if setpriv --reuid={uid} --regid={uid} --clear-groups -- test -r {wd} -a -x {wd}; then mode=user; fi
fi
echo "CAR-RUNNER $mode"
"""

_RUN = r"""{emit}cd {wd}
rm -f {junit}
{chan_setup}start=$(date +%s)
timeout -k 10 {t} {prefix}env HOME={home} PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 {env} \
  bash -c {cmd} > {d}/log 2>&1 < /dev/null {fds}
rc=$?
{kill}
echo "CAR-RC $rc $(( $(date +%s) - start ))"
{emits}"""


@dataclasses.dataclass(frozen=True)
class TestRun:
    exit_code: int
    timed_out: bool
    log: str  # stdout and stderr interleaved, as on a terminal (the tail, when capped)
    junit_xml: str | None
    duration_s: float
    channel: Capped | None = None  # the result channel's raw bytes (None: no channel)
    log_size: int = 0


@dataclasses.dataclass(frozen=True)
class Caps:
    """What one run may send back, in bytes (the sandbox's exec output must hold it)."""

    log: int = 1024 * 1024
    junit: int = 4 * 1024 * 1024
    channel: int = 4 * 1024 * 1024

    @classmethod
    def within(cls, output_cap: int) -> Caps:
        """Caps whose base64 form fits ``output_cap`` with room to spare."""
        budget = output_cap * 3 // 4 - 64 * 1024
        default = cls()
        scale = min(1.0, budget / (default.log + default.junit + default.channel))
        return cls(
            *(max(4096, int(v * scale)) for v in (default.log, default.junit, default.channel))
        )


class TestRunner:
    """Owns the scratch directory and the unprivileged identity for one grading sandbox."""

    def __init__(self, sb: Sandbox, workdir: str, *, scratch: str | None = None):
        self.sb = sb
        self.workdir = workdir
        # Unpredictable, and created only in the grading sandbox: nothing can be planted there.
        # ``scratch``: one a set-up made already (in the snapshot this sandbox was copied from).
        self.dir = scratch or f"/tmp/car-grade-{secrets.token_hex(8)}"
        self.as_user = False
        self.caps = Caps.within(sb.output_cap)

    @property
    def prefix(self) -> str:
        """Command prefix that drops to the test user (empty when running as root)."""
        if not self.as_user:
            return ""
        return f"setpriv --reuid={TEST_UID} --regid={TEST_UID} --clear-groups -- "

    @property
    def junit_path(self) -> str:
        return f"{self.dir}/out/junit.xml"

    @property
    def plugin_dir(self) -> str:
        return f"{self.dir}/plugin"

    @property
    def key_path(self) -> str:
        return f"{self.dir}/key"

    @property
    def channel_path(self) -> str:
        return f"{self.dir}/chan"

    def setup_script(self) -> str:
        """Scratch dir and test user; prints ``CAR-RUNNER user|root`` (see :meth:`parse_setup`)."""
        return _SETUP.format(uid=TEST_UID, wd=q(self.workdir), d=q(self.dir))

    def parse_setup(self, stdout: str) -> None:
        self.as_user = "CAR-RUNNER user" in stdout.splitlines()

    async def setup(self) -> None:
        r = await run_checked(self.sb, self.setup_script(), "setting up the test runner")
        self.parse_setup(r.stdout)

    async def run(
        self,
        cmd: str,
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        as_root: bool = False,
        channel: bool = False,
        python_path: str | None = None,
    ) -> TestRun:
        """Run ``cmd`` (``{junitxml}`` is replaced by the report path) in the workdir, as the
        test user unless ``as_root``. ``channel``: hand the command the result channel and key
        descriptors and send the channel back. ``python_path`` goes in front of any
        ``PYTHONPATH`` the image sets."""
        prefix = "" if as_root else self.prefix
        raw_cmd, cmd = cmd, cmd.replace("{junitxml}", self.junit_path)
        env_words = " ".join(q(f"{k}={v}") for k, v in (env or {}).items())
        if python_path:
            env_words += f' PYTHONPATH={q(python_path)}"${{PYTHONPATH:+:$PYTHONPATH}}"'
        kill = f"{prefix}bash -c 'kill -KILL -1' 2>/dev/null || true" if prefix else ""
        caps, d = self.caps, self.dir
        emits = emit_command("CAR-LOG", f"{d}/log", caps.log)
        if "{junitxml}" in raw_cmd:
            emits += emit_command("CAR-JUNIT", self.junit_path, caps.junit, "head")
        chan_setup = fds = ""
        if channel:
            chan = q(self.channel_path)
            chan_setup = f"rm -f {chan}; (umask 077; : > {chan})\n"
            fds = f"{CHANNEL_FD}>>{chan} {KEY_FD}<{q(self.key_path)}"
            emits += emit_command("CAR-CHAN", self.channel_path, caps.channel, "head")
        script = _RUN.format(
            emit=EMIT,
            wd=q(self.workdir),
            t=int(max(1, timeout)),
            prefix=prefix,
            home=q(f"{d}/home"),
            env=env_words,
            cmd=q(cmd),
            d=q(d),
            kill=kill,
            junit=q(self.junit_path),
            chan_setup=chan_setup,
            fds=fds,
            emits=emits,
        )
        t0 = time.monotonic()
        r = await self.sb.exec(script, timeout=timeout + 60)
        rc_line = next((ln for ln in r.stdout.splitlines() if ln.startswith("CAR-RC ")), None)
        log = parse_emitted(r.stdout, "CAR-LOG", caps.log)
        if r.timed_out or rc_line is None:
            return TestRun(124, True, log.text(), None, time.monotonic() - t0, log_size=log.size)
        _, rc_s, elapsed_s = rc_line.split()
        rc, elapsed = int(rc_s), int(elapsed_s)
        timed_out = rc == 124 or (rc == 137 and elapsed >= timeout)
        junit = None
        if "{junitxml}" in raw_cmd:
            report = parse_emitted(r.stdout, "CAR-JUNIT", caps.junit, "head")
            junit = report.text() if report.exists and not report.truncated else None
        return TestRun(
            exit_code=rc,
            timed_out=timed_out,
            log=log.text(),
            junit_xml=junit,
            duration_s=time.monotonic() - t0,
            channel=parse_emitted(r.stdout, "CAR-CHAN", caps.channel, "head") if channel else None,
            log_size=max(0, log.size),
        )
