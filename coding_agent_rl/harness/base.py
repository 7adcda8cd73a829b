"""The harness contract: install an agent CLI, configure it for one session, run it detached.

A harness file is mostly data (see claude_code.py): the pinned npm package and the files it
takes from it, the env vars that point the CLI at the adapter, its command line, and any config
files. The mechanics (offline install, agent user, detached launch, log copy) live here and in
install.py / launch.py / agent_user.py.
"""

from __future__ import annotations

import abc
import base64
import pathlib
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from typing import ClassVar

from coding_agent_rl.harness import launch, pyvenv
from coding_agent_rl.harness.agent_user import agent_user_script
from coding_agent_rl.harness.cache import (
    FetchError,
    NpmPackage,
    cached_tarball,
    override_tarball,
    unpack_dir,
    unpacked,
)
from coding_agent_rl.harness.capabilities import Capabilities
from coding_agent_rl.harness.context import AgentRun, HarnessConfigError, HarnessContext
from coding_agent_rl.harness.install import (
    BIN_DIR,
    InstallError,
    InstallReport,
    Upload,
    Verified,
    install_mounted,
    install_package,
)
from coding_agent_rl.harness.network import UNREACHABLE_EXIT, probe_script, unreachable
from coding_agent_rl.harness.options import args_from_env, env_from_env
from coding_agent_rl.sandbox.base import CommandFailed, Sandbox, SandboxError, SandboxGone
from coding_agent_rl.sandbox.capped_read import read_capped

INLINE_CONFIG_BYTES = 48 * 1024  # config files up to this size travel inside the configure exec
AGENT_LOG_CAP = 2 * 1024 * 1024  # bytes of the agent's log copied to the host (its tail)


class BaseHarness(abc.ABC):
    """Subclasses set the class data below and implement :meth:`env` and :meth:`argv`."""

    name: ClassVar[str]
    package: ClassVar[NpmPackage]
    # Packages the CLI needs besides its own, installed first the same way (Node.js for a CLI
    # shipped as a JavaScript bundle).
    runtime: ClassVar[tuple[NpmPackage, ...]] = ()
    version_args: ClassVar[tuple[str, ...]] = ("--version",)
    # A CLI from PyPI instead of npm (``package`` then unused): see pyvenv.py.
    python: ClassVar[pyvenv.PyPackage | None] = None
    capabilities: ClassVar[Capabilities | None] = None  # its row of the docs/agents.md table
    extra_args_env: ClassVar[str | None] = None  # e.g. SLIME_AGENT_CC_EXTRA_ARGS
    extra_env_env: ClassVar[str | None] = None  # e.g. SLIME_AGENT_CC_EXTRA_ENVS

    def __init__(
        self,
        *,
        extra_args: Sequence[str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        upload: Upload = "auto",
        check_adapter: bool = True,
    ):
        """``extra_args`` / ``extra_env`` default to the harness's environment variables."""
        if upload not in ("auto", "raw", "gzip"):
            raise HarnessConfigError(f"upload must be auto, raw or gzip, got {upload!r}")
        if extra_args is None:
            extra_args = args_from_env(self.extra_args_env) if self.extra_args_env else []
        if extra_env is None:
            extra_env = env_from_env(self.extra_env_env) if self.extra_env_env else {}
        self.extra_args = list(extra_args)
        self.extra_env = dict(extra_env)
        self.upload = upload
        self.check_adapter = check_adapter
        self._verified: Verified = {}  # mounted binaries whose --version ran, per image

    # ---- the data a harness file provides -------------------------------------------------------
    @property
    def binary(self) -> str:
        """Absolute path of the CLI in the sandbox."""
        if self.python is not None:
            return f"{self.python.target}/run.py"
        return f"{BIN_DIR}/{self.package.program}"

    @classmethod
    def packages(cls) -> tuple[NpmPackage, ...]:
        """Every npm package installed for this CLI, the CLI's own last."""
        return cls.runtime if cls.python is not None else (*cls.runtime, cls.package)

    @abc.abstractmethod
    def env(self, ctx: HarnessContext) -> dict[str, str]:
        """Env vars that point the CLI at the adapter and keep it offline."""

    @abc.abstractmethod
    def argv(self, ctx: HarnessContext, prompt: str) -> list[str]:
        """The command line (without the extra args)."""

    def config_files(self, ctx: HarnessContext) -> dict[str, str]:
        """Files (absolute path -> text) written as the agent user before the run."""
        return {}

    # ---- mechanics ------------------------------------------------------------------------------
    def host_mounts(self) -> dict[str, str]:
        """Host file -> sandbox path of every file the CLI needs, from the host cache (fetched
        and unpacked on first use: blocking). A backend that bind-mounts host files gives them
        to every sandbox without an upload; :meth:`install` then finds them in place."""
        mounts: dict[str, str] = {}
        for pkg in self.packages():
            try:
                files = unpacked(pkg)
            except FetchError as e:
                raise InstallError(str(e)) from e
            mounts.update({str(path): f"{BIN_DIR}/{name}" for name, path in files.items()})
        if self.python is not None:
            try:
                mounts[str(pyvenv.build(self.python))] = self.python.target
            except FetchError as e:
                raise InstallError(str(e)) from e
        return mounts

    @staticmethod
    def _mounted_main(sb: Sandbox, pkg: NpmPackage) -> pathlib.Path | None:
        """The host file (or folder) mounted as ``pkg``'s main file when all of it is mounted."""
        by_target = {t: h for h, t in sb.mounts.items()}
        if all(f"{BIN_DIR}/{name}" in by_target for name in pkg.files.values()):
            return pathlib.Path(by_target[f"{BIN_DIR}/{pkg.main}"])
        return None

    @staticmethod
    def _is_pinned_copy(pkg: NpmPackage, path: pathlib.Path) -> bool:
        """Whether ``path`` is the main file unpacked from the integrity-checked pinned
        tarball in the host cache."""
        if pkg.integrity is None:
            return False
        folder = unpack_dir(pkg, cached_tarball(pkg))
        return path == folder / pkg.main and (folder / ".complete").is_file()

    async def install(self, sb: Sandbox) -> InstallReport:
        """Each package (runtime first): use it mounted from the host cache, else reuse the
        pinned copy if the sandbox has it, else upload it from the host cache. The report is
        the CLI's own."""
        report = None
        for pkg in self.packages():
            report = await self._install(sb, pkg)
        if self.python is not None:
            report = await pyvenv.install(sb, self.python, self._verified, self.upload)
        assert report is not None
        return report

    async def _install(self, sb: Sandbox, pkg: NpmPackage) -> InstallReport:
        # A user-supplied tarball has no pinned version: any working binary from it is accepted,
        # but never a copy the image happens to have.
        try:
            own = override_tarball(pkg) is not None
        except FetchError as e:
            raise InstallError(str(e)) from e
        program = f"{BIN_DIR}/{pkg.program}"
        version_args = self.version_args if pkg is self.package else ("--version",)
        mounted = self._mounted_main(sb, pkg)
        if mounted is not None and not own and self._is_pinned_copy(pkg, mounted):
            # The host file came out of the pinned tarball whose npm integrity was checked when
            # it was unpacked: its version is known, no ``--version`` run is needed. (An image
            # that cannot run it shows as the agent's crash, exit 126/127, with the log tail.)
            return InstallReport(program, pinned_version(pkg), "mount")
        if mounted is not None:
            return await install_mounted(
                sb,
                program,
                mounted / pkg.program[len(pkg.main) + 1 :] if pkg.command else mounted,
                version=None if own else pinned_version(pkg),
                version_args=version_args,
                verified=self._verified,
            )
        return await install_package(
            sb,
            pkg,
            version=None if own else pinned_version(pkg),
            version_args=version_args,
            upload=self.upload,
            reuse_image=not own,
        )

    @property
    def pinned_version(self) -> str:
        """The version string ``--version`` prints (the npm version without a platform suffix)."""
        return self.python.version if self.python is not None else pinned_version(self.package)

    async def configure(self, sb: Sandbox, ctx: HarnessContext) -> None:
        """Agent user + workdir ownership, the CLI's config files, and an adapter reachability
        check, joined into one exec (each exec is a round trip to the sandbox)."""
        q = shlex.quote
        # The user script's status is its last command's, as when it ran on its own.
        script = f"( {agent_user_script(ctx.user, ctx.agent_home, ctx.workdir)} ) || exit $?\n"
        files = self.config_files(ctx)
        inline = sum(len(t.encode()) for t in files.values()) <= INLINE_CONFIG_BYTES
        if inline:
            script += "set -e\n" + "".join(
                f"mkdir -p {q(posixpath.dirname(path))}\n"
                f"printf %s {q(base64.b64encode(text.encode()).decode())} | base64 -d > {q(path)}\n"
                f"chmod 600 {q(path)}\n"
                for path, text in files.items()
            )
            script += self._chown_script(ctx, files)
        if self.check_adapter:
            script += probe_script(ctx.adapter_url)
        res = await sb.exec(script, timeout=300)
        if self.check_adapter and res.exit_code == UNREACHABLE_EXIT:
            raise unreachable(ctx.adapter_url, res.stderr)
        if not res.ok:
            raise CommandFailed("configuring the agent user and its files", res)
        if not inline:  # too large for one command line: through the file API
            for path, text in files.items():
                await sb.write_file(path, text, mode=0o600)
            if chown := self._chown_script(ctx, files):
                await sb.exec(chown, check=True)

    @staticmethod
    def _chown_script(ctx: HarnessContext, files: Mapping[str, str]) -> str:
        """Config files (and folders) created as root go to the agent: the CLI writes next to
        its config."""
        if not files or ctx.user == "root":
            return ""
        owned = {ctx.agent_home if p.startswith(ctx.agent_home + "/") else p for p in files}
        paths = " ".join(shlex.quote(p) for p in sorted(owned))
        return f"chown -R {shlex.quote(ctx.user)}: {paths}\n"

    def full_env(self, ctx: HarnessContext) -> dict[str, str]:
        """The CLI's environment on top of the sandbox's (whose PATH gets BIN_DIR in front)."""
        base = {"HOME": ctx.agent_home, "USER": ctx.user, "LOGNAME": ctx.user}
        return {**base, **self.env(ctx), **self.extra_env, **ctx.env}

    def full_argv(self, ctx: HarnessContext, prompt: str) -> list[str]:
        return [*self.argv(ctx, prompt), *self.extra_args, *ctx.args]

    async def run(self, sb: Sandbox, ctx: HarnessContext, prompt: str, budget_s: float) -> AgentRun:
        """Run the CLI detached as ``ctx.user`` within ``budget_s``; copy its log to the host."""
        spec = launch.LaunchSpec(
            argv=self.full_argv(ctx, prompt),
            env=self.full_env(ctx),
            cwd=ctx.workdir,
            user=ctx.user,
            tag=ctx.tag,
            path_prefix=BIN_DIR,
        )
        res = await launch.run_detached(sb, spec, budget_s)
        host_log = None
        if ctx.log_dir is not None:
            host_log = pathlib.Path(ctx.log_dir) / f"{ctx.tag}.log"
            host_log.parent.mkdir(parents=True, exist_ok=True)
            host_log.write_bytes(await agent_log(sb, res.log_path))
        return AgentRun(
            exit_code=res.exit_code,
            timed_out=res.timed_out,
            duration_s=res.duration_s,
            log_path=res.log_path,
            log_tail=res.log_tail,
            host_log_path=host_log,
        )


def pinned_version(pkg: NpmPackage) -> str:
    """What ``--version`` of ``pkg``'s program prints (its npm version, no platform suffix)."""
    return pkg.version.split("-")[0]


async def agent_log(sb: Sandbox, path: str, cap: int = AGENT_LOG_CAP) -> bytes:
    """The tail of the agent's log, at most ``cap`` bytes, best-effort: the agent writes the
    log, so whatever it did to it (a 1 GiB sparse file, garbage) is reported in the copy, never
    raised. Only a sandbox that is gone raises (that is ours to report)."""
    try:
        got = await read_capped(sb, path, cap)
    except SandboxGone:
        raise
    except SandboxError as e:
        return f"[coding-agent-rl: the agent log could not be read: {e}]\n".encode()
    if got.size == -1:
        return b"[coding-agent-rl: the agent log is missing]\n"
    if got.size == -2:
        return b"[coding-agent-rl: the agent log is not a regular file]\n"
    return got.data
