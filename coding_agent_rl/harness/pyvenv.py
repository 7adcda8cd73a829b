"""A Python agent CLI (a PyPI package): its locked wheel set installed once into a folder of its
own in the host cache, mounted read-only (or uploaded as one tar), run by the task image's CPython
as ``python3.X -I -S <folder>/run.py`` (docs/modules/harness.md: layout, isolation)."""

from __future__ import annotations

import asyncio
import compileall
import dataclasses
import functools
import hashlib
import pathlib
import shlex
import shutil
import subprocess
import sys
import time

from coding_agent_rl.harness import cache
from coding_agent_rl.harness.install import (
    BIN_DIR,
    InstallError,
    InstallReport,
    Upload,
    Verified,
    mounted_once,
    pick_upload,
)
from coding_agent_rl.sandbox.base import Sandbox

# Wheels for the image's CPython on x86-64 glibc Linux (manylinux up to glibc 2.28).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

LAUNCHER = '''"""Runs {spec} from the site-packages beside this file (python -I -S run.py ...)."""
import os, site, sys
site.addsitedir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
sys.argv[0] = {program!r}
from {module} import {attr}
sys.exit({attr}())
'''


@dataclasses.dataclass(frozen=True)
class PyPackage:
    """A pinned PyPI CLI and its full wheel lock (``name==version`` each, the CLI's own too)."""

    name: str  # e.g. "mini-swe-agent"
    version: str
    entry: str  # "module:callable" run by the launcher (the console script's target)
    lock: tuple[str, ...]
    python: str = "3.11"  # the CPython minor version of the task images

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def folder_name(self) -> str:
        """Names the version, the Python and the lock (a changed lock is built anew)."""
        digest = hashlib.sha256("\n".join(sorted(self.lock)).encode()).hexdigest()[:12]
        return f"{self.name}-{self.version}-py{self.python.replace('.', '')}-{digest}"

    @property
    def interpreter(self) -> str:
        return f"python{self.python}"

    @property
    def target(self) -> str:
        """The folder in the sandbox."""
        return f"{BIN_DIR}/{self.name}"

    def argv(self) -> list[str]:
        """The command line that starts the CLI in the sandbox (found on the sandbox's PATH)."""
        return [self.interpreter, "-I", "-S", f"{self.target}/run.py"]


def folder(pkg: PyPackage) -> pathlib.Path:
    return cache.agents_dir() / "python" / pkg.folder_name


def state(pkg: PyPackage) -> str:
    path = folder(pkg)
    return f"ready ({path})" if (path / ".complete").is_file() else "not fetched"


def _pip(pkg: PyPackage, *args: str, timeout: float) -> None:
    target = [
        "--only-binary=:all:",
        "--no-deps",
        "--python-version",
        pkg.python,
        "--implementation",
        "cp",
        "--abi",
        "cp" + pkg.python.replace(".", ""),
        *(x for p in PLATFORMS for x in ("--platform", p)),
    ]
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args, *target]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise cache.FetchError(f"pip {args[0]} failed: {e}") from e
    if r.returncode != 0:
        raise cache.FetchError(f"pip {args[0]} failed: {(r.stderr or r.stdout).strip()[-1500:]}")


def build(pkg: PyPackage) -> pathlib.Path:
    """The CLI's folder on the host: wheels fetched with pip (once), installed, launcher written,
    byte-compiled when this Python is the image's minor version. Blocking."""
    dest = folder(pkg)
    if (dest / ".complete").is_file():
        return dest
    wheels = cache.agents_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    _pip(pkg, "download", "--dest", str(wheels), *pkg.lock, timeout=1800)
    stamp = "\n".join(pkg.lock) + "\n"
    with cache.staged(dest, stamp, f"could not build {pkg.spec} in {dest}") as tmp:
        site = tmp / "site-packages"
        _pip(
            pkg,
            "install",
            "--no-index",
            "--find-links",
            str(wheels),
            "--no-compile",
            "--target",
            str(site),
            *pkg.lock,
            timeout=900,
        )
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts for the host's Python
        module, attr = pkg.entry.split(":")
        launcher = LAUNCHER.format(spec=pkg.spec, program=pkg.name, module=module, attr=attr)
        (tmp / "run.py").write_text(launcher)
        if sys.version_info[:2] == tuple(int(x) for x in pkg.python.split(".")):
            compileall.compile_dir(site, quiet=2, workers=1)  # else compiled in memory per run
        for path in [tmp, *tmp.rglob("*")]:  # readable by the agent user in the sandbox
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def _version_command(pkg: PyPackage) -> str:
    code = (
        "import sys, importlib.metadata as m; "
        f"sys.path.insert(0, {pkg.target + '/site-packages'!r}); print(m.version({pkg.name!r}))"
    )
    return f"{pkg.interpreter} -I -S -c {shlex.quote(code)} 2>&1"


def _no_interpreter(pkg: PyPackage) -> InstallError:
    return InstallError(
        f"{pkg.name} runs on the task image's CPython {pkg.python}, and this image has no "
        f"{pkg.interpreter} on its PATH"
    )


async def _check(sb: Sandbox, pkg: PyPackage, how: str) -> str:
    res = await sb.exec(f'PATH={BIN_DIR}:"$PATH" {_version_command(pkg)}', timeout=60)
    got = (res.stdout.strip().splitlines() or [""])[-1]
    if res.exit_code == 127:
        raise _no_interpreter(pkg)
    if res.exit_code != 0 or got != pkg.version:
        raise InstallError(
            f"{pkg.target} ({how}) does not import as {pkg.spec}: exit {res.exit_code}: {got!r}"
        )
    return got


async def install(
    sb: Sandbox, pkg: PyPackage, verified: Verified, upload: Upload = "auto"
) -> InstallReport:
    """The CLI's folder in the sandbox: bind-mounted from the host cache (checked once per image
    and host folder), already uploaded (its stamp), or uploaded now as one tar (gzipped for a
    remote backend, as ``upload`` says: see install.py)."""
    program = f"{pkg.target}/run.py"
    by_target = {t: h for h, t in sb.mounts.items()}
    if pkg.target in by_target:
        host = pathlib.Path(by_target[pkg.target])
        check = functools.partial(_check, sb, pkg, f"mounted from {host}")
        return await mounted_once(sb, program, host / ".complete", verified, check)
    stamp = f"{pkg.target}/.complete"
    res = await sb.exec(
        f'PATH={BIN_DIR}:"$PATH" command -v {pkg.interpreter} >/dev/null || exit 127\n'
        f"cat {stamp} 2>/dev/null || true",
        timeout=30,
    )
    if res.exit_code == 127:  # before an upload of hundreds of MB
        raise _no_interpreter(pkg)
    if pkg.spec in res.stdout.splitlines():
        return InstallReport(program, pkg.version, "installed")
    t0 = time.monotonic()
    try:
        local = await asyncio.to_thread(build, pkg)
        tar = await asyncio.to_thread(cache.archived, local)
        if pick_upload(sb, upload) == "gzip":  # GNU tar -x reads it as it is
            tar = await asyncio.to_thread(cache.gzipped, tar)
    except cache.FetchError as e:
        raise InstallError(str(e)) from e
    t1 = time.monotonic()
    dest = f"{pkg.target}.tar"
    await sb.write_file(dest, tar, mode=0o644)
    t2 = time.monotonic()
    await sb.exec(
        f"rm -rf {pkg.target} && mkdir -p {pkg.target} && tar -xf {dest} -C {pkg.target} "
        f"&& rm -f {dest}",
        check=True,
        timeout=600,
    )
    t3 = time.monotonic()
    await _check(sb, pkg, "uploaded")
    return InstallReport(
        program,
        pkg.version,
        "upload",
        fetch_s=t1 - t0,
        upload_s=t2 - t1,
        upload_bytes=tar.stat().st_size,
        unpack_s=t3 - t2,
        version_s=time.monotonic() - t3,
    )
