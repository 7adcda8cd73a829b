"""Put an agent CLI into a sandbox with no network: reuse the image's copy or upload the binary.

Every CLI ends up at ``BIN_DIR/<name>`` (a symlink when the image already has the right version,
a read-only bind mount of the host cache where the backend mounts host files), so command lines
never depend on the image's PATH.

Upload form: the raw binary to a local engine (Docker: ~2.3 s for Claude Code's 402 MB, where a
gzip upload + in-sandbox ``gzip -d`` takes ~6.5 s), gzip to remote backends where the link, not
the CPU, is the bottleneck.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
import shlex
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from coding_agent_rl.errors import HarnessError
from coding_agent_rl.harness import cache
from coding_agent_rl.sandbox.base import Sandbox

log = logging.getLogger(__name__)

BIN_DIR = "/opt/coding-agent-rl/bin"

Upload = Literal["auto", "raw", "gzip"]


class InstallError(HarnessError):
    """The CLI could not be installed or does not run in the sandbox."""


@dataclasses.dataclass(frozen=True)
class InstallReport:
    binary: str  # absolute path in the sandbox
    version: str  # what ``--version`` printed (first line)
    source: str  # "installed" (already there), "image", "upload" or "mount" (bind-mounted)
    fetch_s: float = 0.0
    upload_s: float = 0.0
    upload_bytes: int = 0
    unpack_s: float = 0.0
    version_s: float = 0.0


def pick_upload(sb: Sandbox, upload: Upload) -> Literal["raw", "gzip"]:
    if upload != "auto":
        return upload
    return "raw" if sb.is_local() else "gzip"  # an upload that never leaves this machine


async def _version(sb: Sandbox, path: str, version_args: tuple[str, ...]) -> tuple[int, str]:
    cmd = " ".join(shlex.quote(a) for a in (path, *version_args))
    # BIN_DIR first, as when the CLI runs: a script's interpreter (node) may be installed there.
    res = await sb.exec(f'PATH={BIN_DIR}:"$PATH" {cmd} 2>&1', timeout=60)
    return res.exit_code, (res.stdout.strip().splitlines() or [""])[0]


def _stamp(name: str) -> str:
    return f"{BIN_DIR}/.{name}.version"


async def _find_existing(
    sb: Sandbox, name: str, want: str | None, version_args: tuple[str, ...], reuse_image: bool
) -> tuple[str, str] | None:
    """(path, version) of a usable copy already in the sandbox: ours first, then the image's.

    Ours is recognised by the version stamp written at install (no slow ``--version`` run).
    """
    target = f"{BIN_DIR}/{name}"
    res = await sb.exec(
        f'if [ -x {target} ] && [ -r {_stamp(name)} ]; then echo "stamp $(cat {_stamp(name)})"; fi\n'
        f"command -v {shlex.quote(name)} || true",
        timeout=30,
    )
    lines = res.stdout.splitlines()
    stamped = next((x[6:] for x in lines if x.startswith("stamp ")), None)
    if stamped is not None and (want is None or want in stamped):
        return target, stamped
    if not reuse_image:
        return None
    for path in dict.fromkeys(x for x in lines if x.startswith("/") and x != target):
        code, version = await _version(sb, path, version_args)
        if code == 0 and (want is None or want in version):
            return path, version
    return None


# (image, sandbox path, host path, size, mtime) -> what ``--version`` printed in that image.
Verified = dict[tuple[str, str, str, int, int], str]


async def install_mounted(
    sb: Sandbox,
    target: str,
    host_path: pathlib.Path,
    *,
    version: str | None,
    version_args: tuple[str, ...] = ("--version",),
    verified: Verified,
) -> InstallReport:
    """The CLI is bind-mounted read-only at ``target`` from ``host_path``: nothing to upload.

    ``--version`` runs once per image and host file (an image whose libc cannot run the binary
    fails here); later sandboxes of that image trust the entry in ``verified``.
    """

    async def check() -> str:
        code, got = await _version(sb, target, version_args)
        if code != 0 or (version is not None and version not in got):
            raise InstallError(
                f"{target} (mounted from {host_path}) {' '.join(version_args)} -> exit {code}: "
                f"{got!r}" + (f" (want {version})" if version else "")
            )
        return got

    return await mounted_once(sb, target, host_path, verified, check)


async def mounted_once(
    sb: Sandbox,
    target: str,
    host_path: pathlib.Path,
    verified: Verified,
    check: Callable[[], Awaitable[str]],
) -> InstallReport:
    """A mounted CLI's report: ``check`` (its version, or an InstallError) runs once per image
    and host file (its size and mtime: a rebuilt file is checked again)."""
    st = host_path.stat()
    key = (sb.image, target, str(host_path), st.st_size, st.st_mtime_ns)
    if key in verified:
        return InstallReport(target, verified[key], "mount")
    t0 = time.monotonic()
    verified[key] = await check()
    return InstallReport(target, verified[key], "mount", version_s=time.monotonic() - t0)


async def install_package(
    sb: Sandbox,
    pkg: cache.NpmPackage,
    *,
    version: str | None,
    version_args: tuple[str, ...] = ("--version",),
    upload: Upload = "auto",
    reuse_image: bool = True,
) -> InstallReport:
    """Make ``BIN_DIR/<pkg.main>`` run ``version`` (None: any version, e.g. a user tarball).

    ``reuse_image``: accept a copy of that version on the image's PATH instead of uploading.
    """
    name = pkg.main
    target = f"{BIN_DIR}/{pkg.program}"
    found = await _find_existing(sb, name, version, version_args, reuse_image and not pkg.command)
    if found is not None:
        path, got = found
        if path == f"{BIN_DIR}/{name}":
            return InstallReport(target, got, "installed")
        await sb.exec(f"mkdir -p {BIN_DIR} && ln -sfn {shlex.quote(path)} {target}", check=True)
        return InstallReport(target, got, "image")

    t0 = time.monotonic()
    try:
        files = await asyncio.to_thread(cache.unpacked, pkg)
    except cache.FetchError as e:
        raise InstallError(str(e)) from e
    form = pick_upload(sb, upload)
    folders = {n for n, p in files.items() if p.is_dir()}  # sent as one tar each
    for n in folders:
        files[n] = await asyncio.to_thread(cache.archived, files[n])
    if form == "gzip":  # GNU tar reads a gzipped tar as it is
        files = {n: await asyncio.to_thread(cache.gzipped, p) for n, p in files.items()}
    t1 = time.monotonic()
    sent = 0
    unpack = []
    for installed, host_path in files.items():
        dest = f"{BIN_DIR}/{installed}"
        if installed in folders:
            dest += ".tar"
            unpack.append(
                f"rm -rf {dest[:-4]} && mkdir -p {dest[:-4]} && tar -xf {dest} -C {dest[:-4]} "
                f"&& rm -f {dest}"
            )
        elif form == "gzip":
            dest += ".gz"
            unpack.append(f"gzip -d -f {dest} && chmod 755 {dest[:-3]}")
        await sb.write_file(dest, host_path, mode=0o755)
        sent += host_path.stat().st_size
    t2 = time.monotonic()
    if unpack:
        await sb.exec(" && ".join(unpack), check=True, timeout=600)
    t3 = time.monotonic()
    code, got = await _version(sb, target, version_args)
    t4 = time.monotonic()
    if code != 0 or (version is not None and version not in got):
        raise InstallError(
            f"{target} {' '.join(version_args)} -> exit {code}: {got!r}"
            + (f" (want {version})" if version else "")
        )
    await sb.write_file(_stamp(name), got + "\n")
    report = InstallReport(
        target,
        got,
        "upload",
        fetch_s=t1 - t0,
        upload_s=t2 - t1,
        upload_bytes=sent,
        unpack_s=t3 - t2,
        version_s=t4 - t3,
    )
    log.info(
        "installed %s %s: fetch %.2fs, upload %.2fs (%d MB, %s), unpack %.2fs, --version %.2fs",
        name,
        got,
        report.fetch_s,
        report.upload_s,
        sent >> 20,
        form,
        report.unpack_s,
        report.version_s,
    )
    return report
