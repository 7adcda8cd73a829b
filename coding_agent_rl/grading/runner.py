"""Run a test command in the grading sandbox as an unprivileged user, with a hard time limit.

The grader's scratch directory has a random name chosen by the grader and exists only in the
grading sandbox; reports (JUnit XML) go there, not into the repository. Tests run as uid 4999 through
``setpriv`` (util-linux) so code under test cannot touch root-owned files (the grader's scripts,
the interpreter's site-packages); after the run every process of that uid is killed, so nothing
keeps writing once the grader reads the results. Without ``setpriv`` the tests run as root and
``as_user`` says so.
"""

from __future__ import annotations

import dataclasses
import secrets
import time

from coding_agent_rl.grading.workspace import q, run_checked
from coding_agent_rl.sandbox.base import Sandbox, SandboxFileNotFound

TEST_UID = 4999

_SETUP = r"""d={d}
mkdir -p "$d/out" "$d/home"
chmod 711 "$d"  # traversable, not listable: the test user reaches out/ and home/ only
mode=root
if command -v setpriv >/dev/null 2>&1; then
  chown -R {uid}:{uid} {wd} "$d/out" "$d/home"
  if setpriv --reuid={uid} --regid={uid} --clear-groups -- test -r {wd} -a -x {wd}; then mode=user; fi
fi
echo "CAR-RUNNER $mode"
"""

_RUN = r"""cd {wd}
rm -f {junit}
start=$(date +%s)
timeout -k 10 {t} {prefix}env HOME={home} PYTHONDONTWRITEBYTECODE=1 {env} bash -c {cmd} \
  > {d}/log 2>&1 < /dev/null
rc=$?
{kill}
echo "$rc $(( $(date +%s) - start ))"
"""


@dataclasses.dataclass(frozen=True)
class TestRun:
    exit_code: int
    timed_out: bool
    log: str  # stdout and stderr interleaved, as on a terminal
    junit_xml: str | None
    duration_s: float


class TestRunner:
    """Owns the scratch directory and the unprivileged identity for one grading sandbox."""

    def __init__(self, sb: Sandbox, workdir: str):
        self.sb = sb
        self.workdir = workdir
        # Unpredictable, and created only in the grading sandbox: nothing can be planted there.
        self.dir = f"/tmp/car-grade-{secrets.token_hex(8)}"
        self.as_user = False

    @property
    def prefix(self) -> str:
        """Command prefix that drops to the test user (empty when running as root)."""
        if not self.as_user:
            return ""
        return f"setpriv --reuid={TEST_UID} --regid={TEST_UID} --clear-groups -- "

    @property
    def junit_path(self) -> str:
        return f"{self.dir}/out/junit.xml"

    def setup_script(self) -> str:
        """Scratch dir and test user; prints ``CAR-RUNNER user|root`` (see :meth:`parse_setup`)."""
        return _SETUP.format(uid=TEST_UID, wd=q(self.workdir), d=q(self.dir))

    def parse_setup(self, stdout: str) -> None:
        self.as_user = "CAR-RUNNER user" in stdout.splitlines()

    async def setup(self) -> None:
        r = await run_checked(self.sb, self.setup_script(), "setting up the test runner")
        self.parse_setup(r.stdout)

    async def run(
        self, cmd: str, *, timeout: float, env: dict[str, str] | None = None, as_root: bool = False
    ) -> TestRun:
        """Run ``cmd`` (``{junitxml}`` is replaced by the report path) in the workdir, as the
        test user unless ``as_root``."""
        prefix = "" if as_root else self.prefix
        raw_cmd, cmd = cmd, cmd.replace("{junitxml}", self.junit_path)
        env_words = " ".join(q(f"{k}={v}") for k, v in (env or {}).items())
        kill = f"{prefix}bash -c 'kill -KILL -1' 2>/dev/null || true" if prefix else ""
        script = _RUN.format(
            wd=q(self.workdir),
            t=int(max(1, timeout)),
            prefix=prefix,
            home=q(f"{self.dir}/home"),
            env=env_words,
            cmd=q(cmd),
            d=q(self.dir),
            kill=kill,
            junit=q(self.junit_path),
        )
        t0 = time.monotonic()
        r = await self.sb.exec(script, timeout=timeout + 60)
        if r.timed_out:
            return TestRun(
                124, True, await self._read(f"{self.dir}/log") or "", None, time.monotonic() - t0
            )
        rc_s, elapsed_s = (r.stdout.strip().splitlines() or ["125 0"])[-1].split()
        rc, elapsed = int(rc_s), int(elapsed_s)
        timed_out = rc == 124 or (rc == 137 and elapsed >= timeout)
        junit = await self._read(self.junit_path) if "{junitxml}" in raw_cmd else None
        return TestRun(
            exit_code=rc,
            timed_out=timed_out,
            log=await self._read(f"{self.dir}/log") or "",
            junit_xml=junit,
            duration_s=time.monotonic() - t0,
        )

    async def _read(self, path: str) -> str | None:
        try:
            data = await self.sb.read_file(path, binary=True)
        except SandboxFileNotFound:
            return None
        return data.decode("utf-8", "replace")
