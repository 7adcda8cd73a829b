"""Host-side cache of agent CLI packages: fetch once from npm, verify, unpack only what is used.

Layout under ``$CODING_AGENT_RL_CACHE`` (default ``~/.cache/coding-agent-rl``)::

    agents/<npm pack file name>.tgz        the pinned tarball, as ``npm pack`` names it
    agents/unpacked/<tarball stem>/<name>  the files a harness installs (main binary first); a
                                           member ending in "/" is a folder, unpacked whole

Sandboxes never reach the network: the unpacked files are uploaded into them (see install.py).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import gzip
import hashlib
import json
import logging
import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping

from coding_agent_rl import settings
from coding_agent_rl.errors import HarnessError

log = logging.getLogger(__name__)


class FetchError(HarnessError):
    """The CLI package could not be fetched, verified or unpacked on the host."""


@dataclasses.dataclass(frozen=True)
class NpmPackage:
    """One pinned npm tarball and the files a harness takes out of it."""

    name: str  # npm package name, e.g. "@anthropic-ai/claude-code-linux-x64"
    version: str  # npm version, e.g. "2.1.332" (Codex's platform builds: "0.171.0-linux-x64")
    integrity: str | None  # npm's dist.integrity ("sha512-<base64>") of exactly that version
    files: Mapping[str, str]  # member in the tarball -> installed file name; first = main binary
    tarball_env: str | None = None  # env var naming a local tarball that replaces the fetch
    # The program, relative to the install folder, when the main file is a folder (a Node.js
    # bundle: "gemini-cli/gemini.js"); None: the main file itself.
    command: str | None = None
    # A CLI that is not one bundle: a package-lock.json in ``harness/locks/`` pinning its whole
    # dependency tree, which ``npm ci`` installs (each package checked against its integrity)
    # into a tarball of ``package/node_modules/``. None: the package's own tarball.
    lock: str | None = None

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def tarball_name(self) -> str:
        """The file name ``npm pack`` gives it: scope without '@', '/' -> '-' (``-tree-`` and
        the lock's digest added for a locked dependency tree: a changed lock is a new tree)."""
        tree = f"-tree-{lock_digest(self.lock)}" if self.lock else ""
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}{tree}.tgz"

    @property
    def main(self) -> str:
        return next(iter(self.files.values()))

    @property
    def program(self) -> str:
        """What runs, relative to the install folder."""
        return self.command or self.main


def lock_path(lock: str) -> pathlib.Path:
    return pathlib.Path(__file__).parent / "locks" / lock


def lock_digest(lock: str) -> str:
    """The first 12 hex digits of the lock file's SHA-256 (``missing``: no such file; reading
    it for the install then names the problem)."""
    try:
        return hashlib.sha256(lock_path(lock).read_bytes()).hexdigest()[:12]
    except OSError:
        return "missing"


def agents_dir() -> pathlib.Path:
    return settings.current().agents_dir


def override_tarball(pkg: NpmPackage) -> pathlib.Path | None:
    """The local tarball configured through ``pkg.tarball_env``, if any (must exist)."""
    value = settings.current().agent_var(pkg.tarball_env)
    if not value:
        return None
    path = pathlib.Path(value).expanduser()
    if not path.is_file():
        raise FetchError(f"{pkg.tarball_env}={value} does not name a file")
    return path


def cached_tarball(pkg: NpmPackage) -> pathlib.Path:
    return agents_dir() / pkg.tarball_name


def integrity_of(path: pathlib.Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return "sha512-" + base64.b64encode(digest.digest()).decode()


def verify(pkg: NpmPackage, path: pathlib.Path) -> None:
    """Check the tarball against the pinned npm integrity (a local override is not pinned)."""
    if pkg.integrity is None or pkg.lock:  # a tree: npm ci checked each package's integrity
        return
    got = integrity_of(path)
    if got != pkg.integrity:
        raise FetchError(
            f"{path} does not match the pinned integrity of {pkg.spec} "
            f"(got {got[:24]}..., want {pkg.integrity[:24]}...); delete it and fetch again"
        )


def fetch(pkg: NpmPackage) -> pathlib.Path:
    """The package tarball on the host: the configured override, the cache, or ``npm pack``."""
    override = override_tarball(pkg)
    if override is not None:
        return override
    target = cached_tarball(pkg)
    if target.is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise FetchError(
            f"npm is not installed; fetch {pkg.spec} elsewhere and put it at {target}"
            + (f" or set {pkg.tarball_env}" if pkg.tarball_env else "")
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    if pkg.lock:
        return _fetch_tree(pkg, npm, target)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        log.info("fetching %s from the npm registry", pkg.spec)
        out = _npm(
            [npm, "pack", pkg.spec, "--json", "--pack-destination", tmp], f"npm pack {pkg.spec}"
        )
        filename = json.loads(out)[0]["filename"]
        got = pathlib.Path(tmp) / filename
        verify(pkg, got)
        os.replace(got, target)
    return target


def _npm(argv: list[str], what: str, cwd: pathlib.Path | None = None) -> str:
    """Run npm (15 minutes at most); its stdout, or a FetchError naming ``what`` failed."""
    try:
        r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FetchError(f"{what} failed: {e}") from e
    if r.returncode != 0:
        raise FetchError(f"{what} failed: {r.stderr.strip()[-1000:]}")
    return r.stdout


def read_lock(pkg: NpmPackage) -> dict:
    """``pkg``'s lock file, checked to pin exactly ``pkg`` (its version and integrity)."""
    assert pkg.lock
    path = lock_path(pkg.lock)
    try:
        lock = json.loads(path.read_text())
        root = lock["packages"][""]
        entry = lock["packages"][f"node_modules/{pkg.name}"]
    except (OSError, ValueError, KeyError) as e:
        raise FetchError(f"{path}: not a package-lock.json pinning {pkg.name} ({e})") from None
    if root.get("dependencies") != {pkg.name: pkg.version} or entry.get("version") != pkg.version:
        raise FetchError(f"{path} does not pin {pkg.spec}")
    if pkg.integrity is not None and entry.get("integrity") != pkg.integrity:
        raise FetchError(f"{path} pins another {pkg.spec} tarball than the harness")
    # npm ci checks a package only against the integrity its entry names: one without (a git,
    # file or link dependency, a hand-edited entry) would be installed unchecked. A bundled
    # one (``inBundle``) comes inside its parent's tarball, checked with it.
    unpinned = [
        name
        for name, e in lock["packages"].items()
        if name
        and not (isinstance(e, dict) and e.get("inBundle") is True)
        and not (isinstance(e, dict) and str(e.get("integrity", "")).startswith("sha512-"))
    ]
    if unpinned:
        raise FetchError(f"{path}: no sha512 integrity for {', '.join(unpinned[:5])}")
    return lock


def _fetch_tree(pkg: NpmPackage, npm: str, target: pathlib.Path) -> pathlib.Path:
    """``npm ci`` of the lock (no install scripts, no optional packages), tarred up."""
    lock = read_lock(pkg)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        log.info("installing %s and its locked dependencies from the npm registry", pkg.spec)
        root = pathlib.Path(tmp) / "tree"
        root.mkdir()
        manifest = {"name": lock["packages"][""].get("name", "tree"), "private": True}
        manifest["dependencies"] = {pkg.name: pkg.version}
        (root / "package.json").write_text(json.dumps(manifest))
        (root / "package-lock.json").write_text(json.dumps(lock))
        argv = [npm, "ci", "--ignore-scripts", "--omit=optional", "--no-audit", "--no-fund"]
        _npm(argv, f"npm ci of {pkg.spec}'s lock", cwd=root)
        got = pathlib.Path(tmp) / target.name
        with tarfile.open(got, "w:gz", compresslevel=1) as tar:
            tar.add(root / "node_modules", arcname="package/node_modules")
        os.replace(got, target)
    return target


def unpack_dir(pkg: NpmPackage, tarball: pathlib.Path) -> pathlib.Path:
    if tarball == cached_tarball(pkg):
        key = tarball.name.removesuffix(".tgz")
    else:  # a user tarball: key by path, size and mtime so a replaced file is unpacked again
        st = tarball.stat()
        ident = f"{tarball.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        key = f"local-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"
    return agents_dir() / "unpacked" / key


def unpacked(pkg: NpmPackage) -> dict[str, pathlib.Path]:
    """Installed name -> host path of each file the harness needs (fetched and unpacked once)."""
    tarball = fetch(pkg)
    dest = unpack_dir(pkg, tarball)
    if not (dest / ".complete").exists():
        if tarball == cached_tarball(pkg):
            verify(pkg, tarball)  # a tarball placed in the cache by hand is checked here, once
        _extract(pkg, tarball, dest)
    return {name: dest / name for name in pkg.files.values()}


@contextlib.contextmanager
def staged(dest: pathlib.Path, stamp: str, failure: str) -> Iterator[pathlib.Path]:
    """A temporary folder next to ``dest``, filled by the block, that then becomes ``dest``
    with its ``.complete`` stamp (``stamp``'s text). An OSError is a FetchError (``failure``:
    what failed) unless another process completed ``dest`` meanwhile."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=dest.parent, prefix=".stage-"))
    try:
        yield tmp
        (tmp / ".complete").write_text(stamp)
        if dest.exists():  # a stale, incomplete one
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except OSError as e:
        if not (dest / ".complete").is_file():
            raise FetchError(f"{failure}: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extract(pkg: NpmPackage, tarball: pathlib.Path, dest: pathlib.Path) -> None:
    with staged(dest, pkg.spec + "\n", f"could not unpack {tarball}") as tmp:
        tmp.chmod(0o755)
        with tarfile.open(tarball, "r:gz") as tar:
            for member, name in pkg.files.items():
                if member.endswith("/"):
                    _extract_folder(tar, member, tmp / name, tarball)
                    continue
                try:
                    info = tar.getmember(member)
                except KeyError:
                    raise FetchError(f"{tarball} has no {member} (is it {pkg.name}?)") from None
                src = tar.extractfile(info)
                if src is None:
                    raise FetchError(f"{member} in {tarball} is not a regular file")
                with src, (tmp / name).open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                (tmp / name).chmod(0o755)


def _extract_folder(
    tar: tarfile.TarFile, prefix: str, dest: pathlib.Path, tarball: pathlib.Path
) -> None:
    """The regular files under ``prefix`` into ``dest`` (links and odd members are skipped)."""
    found = False
    for info in tar.getmembers():
        if not info.name.startswith(prefix) or not info.isfile():
            continue
        rel = pathlib.PurePosixPath(info.name[len(prefix) :])
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise FetchError(f"{tarball} has an unsafe member {info.name!r}")
        out = dest.joinpath(*rel.parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(info)
        if src is None:
            continue
        with src, out.open("wb") as f:
            shutil.copyfileobj(src, f, 1 << 20)
        out.chmod(0o755 if info.mode & 0o111 else 0o644)
        found = True
    if not found:
        raise FetchError(f"{tarball} has nothing under {prefix} (is it the right package?)")
    for folder in [dest, *(p for p in dest.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)


def size_of(path: pathlib.Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def archived(folder: pathlib.Path) -> pathlib.Path:
    """``folder`` as one tar (made once, next to it) for an upload: one file crosses, not
    hundreds."""
    out = folder.with_name(folder.name + ".tar")
    if not out.exists():
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        with tarfile.open(tmp, "w") as tar:
            tar.add(folder, arcname=".")
        os.replace(tmp, out)
    return out


def gzipped(path: pathlib.Path) -> pathlib.Path:
    """``path`` gzip-compressed next to it (made once), for uploads over a slow link."""
    gz = path.with_name(path.name + ".gz")
    if not gz.exists():
        tmp = gz.with_name(f".{gz.name}.{os.getpid()}")
        with path.open("rb") as src, gzip.open(tmp, "wb", compresslevel=1) as out:
            shutil.copyfileobj(src, out, 1 << 20)
        os.replace(tmp, gz)
    return gz
